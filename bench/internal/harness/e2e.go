package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/stream"
)

// e2eMode is one way the bench worker takes its SKU locks (its --lock flag).
type e2eMode struct{ flag, name string }

var e2eModes = []e2eMode{
	{"on", "lock on (stockflow)"},
	{"off", "lock off"},
	{"redsync", "lock on (redsync)"},
}

// e2eWorkload is the orders of one end-to-end table: orders of one unit over 200 SKUs, spread by the
// producer's distribution.
type e2eWorkload struct {
	id, title, distribution string
	orders                  int
	lines                   int // > 0: baskets of that many lines (comparison 7)
}

// seed is the units of every SKU: the average SKU about sells out; a hot one rejects most of its orders.
func (wl e2eWorkload) seed() int { return wl.orders * max(wl.lines, 1) / 200 }

func (wl e2eWorkload) table() *Table {
	return &Table{
		ID:    wl.id,
		Title: fmt.Sprintf("5. end to end, 2 worker processes, %s", wl.title),
		Setup: fmt.Sprintf("%d orders of 1 unit from the producer (8 publishers, no rate limit), %d units per SKU; orders/s from the first order placed to the last outcome",
			wl.orders, wl.seed()),
		Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "latency_p50_ms", Header: "p50 latency ms", Digits: 1},
			{Key: "latency_p99_ms", Header: "p99 latency ms", Digits: 1}, {Key: "lock_wait_p99_ms", Header: "p99 lock wait ms", Digits: 1},
			{Key: "redis_cpu_us", Header: "Redis CPU µs/order", Digits: 0},
			{Key: "worker_cpu_us", Header: "workers CPU µs/order", Digits: 0},
			{Key: "rss_mib", Header: "worker peak RSS MiB", Digits: 1},
			{Key: "lock_wait_max_ms", Header: "max lock wait ms", Digits: 1},
			{Key: "busiest_share", Header: "busiest SKU: top worker's share", Digits: 2}},
		RatioOf: "orders_per_s", RatioBase: e2eModes[0].name,
	}
}

// endToEnd is comparison 5: 2 worker processes, orders from the producer, each lock mode.
func (b *bench) endToEnd(ctx context.Context) error {
	if b.cfg.WorkerBin == "" {
		b.progress("e2e skipped: no worker binary (scripts/bench.sh builds it)")
		return nil
	}
	for _, wl := range []e2eWorkload{
		{"e2e-uniform", "200 SKUs uniform", "uniform", b.cfg.E2EOrders, 0},
		{"e2e-hot", "200 SKUs, one hot SKU (half of the orders on SKU-0)", "hot", b.cfg.E2EHotOrders, 0},
	} {
		t := b.addTable(wl.table())
		err := interleave(b.cfg.Rounds, len(e2eModes), func(round, i int) error {
			return b.e2eRound(ctx, t, wl, e2eModes[i], round)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// e2eRound measures one mode on one workload and records it.
func (b *bench) e2eRound(ctx context.Context, t *Table, wl e2eWorkload, mode e2eMode, round int) error {
	res, err := b.e2eRun(ctx, b.single(1), mode, wl)
	if err != nil {
		return fmt.Errorf("%s %s: %w", wl.id, mode.name, err)
	}
	v := res.values(wl.orders)
	b.progress("%s round %d/%d %-22s %7.0f orders/s  latency p50 %7.1f ms p99 %7.1f ms  lock wait p99 %7.1f ms  RSS %.1f MiB",
		wl.id, round+1, b.cfg.Rounds, mode.name, v["orders_per_s"], v["latency_p50_ms"], v["latency_p99_ms"],
		v["lock_wait_p99_ms"], v["rss_mib"])
	t.add(mode.name, v)
	b.checkE2E(wl.id+" "+mode.name, round, res)
	return nil
}

// checkE2E records the checks of one round: the producer's consistency check passed, the workers exited 0.
func (b *bench) checkE2E(name string, round int, res e2eResult) {
	sum := res.sum
	b.checks.expect(name+": consistency check of the producer", sum.Consistent && sum.Missing == 0 && sum.Poisoned == 0,
		"round %d: %d missing, %d poisoned, problems: %s", round+1, sum.Missing, sum.Poisoned, strings.Join(sum.Problems, "; "))
	b.checks.expect(name+": workers exit cleanly", res.exitErr == nil, "round %d: %v", round+1, res.exitErr)
}

type e2eResult struct {
	sum       *producer.Summary
	redisCPU  time.Duration   // CPU time Redis spent during the producer's run
	nodesCPU  []time.Duration // the same, by server (site.masters)
	workerCPU time.Duration   // CPU time both workers spent during it
	rssMiB    float64         // the larger peak RSS of the two workers
	exitErr   error
}

func (res e2eResult) values(orders int) map[string]float64 {
	return map[string]float64{
		"orders_per_s":     res.sum.Throughput,
		"latency_p50_ms":   float64(res.sum.LatencyP50) / 1e6,
		"latency_p99_ms":   float64(res.sum.LatencyP99) / 1e6,
		"lock_wait_p99_ms": res.sum.LockWait.P99,
		"rss_mib":          res.rssMiB,
		"redis_cpu_us":     float64(res.redisCPU.Microseconds()) / float64(orders),
		"worker_cpu_us":    float64(res.workerCPU.Microseconds()) / float64(orders),
		"lock_wait_max_ms": res.sum.LockWait.Max,
		"busiest_share":    res.sum.Busiest().BusiestShare(),
	}
}

// site is the Redis an end-to-end round runs on, and how its streams are laid out.
type site struct {
	url        string
	cluster    bool
	partitions int
	masters    []string // the servers, for their CPU time
	flush      func(context.Context) error
}

// single is the main server, with the streams in partitions.
func (b *bench) single(partitions int) site {
	return site{url: b.mainURL(), partitions: partitions, masters: []string{b.mainAddr},
		flush: func(ctx context.Context) error { return b.main.FlushAll(ctx).Err() }}
}

// args are the worker's settings for the site.
func (s site) args() []string {
	args := []string{"--redis-url", s.url, "--orders-partitions", strconv.Itoa(s.partitions)}
	if s.cluster {
		args = append(args, "--redis-cluster")
	}
	return args
}

// e2eRun runs one round on the emptied site: start 2 workers, produce and wait, read their peak RSS, stop
// them with SIGTERM.
func (b *bench) e2eRun(ctx context.Context, s site, mode e2eMode, wl e2eWorkload) (e2eResult, error) {
	var res e2eResult
	if err := s.flush(ctx); err != nil {
		return res, err
	}
	workers, err := b.startWorkers(ctx, s, mode.flag, 2)
	if err != nil {
		return res, err
	}
	defer workers.kill() // after an early return; stopped workers are gone already
	cpu, err := b.measureCPU(ctx, s.masters, workers.pids(), func() (err error) {
		if res.sum, err = producer.Run(ctx, b.producerConfig(s, wl), nil); err != nil {
			return fmt.Errorf("producer: %w", err)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.redisCPU, res.nodesCPU, res.workerCPU = cpu.redis, cpu.nodes, cpu.procs
	res.rssMiB = workers.peakRSSMiB() // read before SIGTERM
	res.exitErr = workers.stop(30 * time.Second)
	return res, nil
}

// producerConfig places wl's orders on the site and waits for every outcome.
func (b *bench) producerConfig(s site, wl e2eWorkload) producer.Config {
	cfg := producer.Config{
		Config: stream.Config{RedisURL: s.url, Cluster: s.cluster, OrdersPartitions: s.partitions, OrdersStream: "orders",
			ResultsStream: "order-results", PoisonStream: "orders-poison", ConsumerGroup: "inventory"},
		Orders: wl.orders, SKUs: 200, Quantity: 1, Distribution: wl.distribution, SeedStock: wl.seed(),
		Wait: true, Timeout: 3 * time.Minute,
	}
	if wl.lines > 0 {
		cfg.Lines = fmt.Sprintf("%d-%d", wl.lines, wl.lines)
	}
	return cfg
}

func (b *bench) mainURL() string { return "redis://" + b.mainAddr + "/0" }
