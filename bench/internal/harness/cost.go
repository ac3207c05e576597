package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/childproc"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/redisstream"
)

// Comparison 8, the cost of an order (issue 29): what deciding one order costs Redis and the consumer, and
// how many round trips, for the worker and two peers on the same orders, in "drain mode": the consumers
// are started and stopped (SIGSTOP) while the orders are published, Redis's statistics are reset, the
// consumers are resumed until the group has nothing left, and the counters are read.

// costContender is one consumer of the comparison: 2 processes of it drain the orders.
type costContender struct {
	name string
	// args are the command of process i, serving /readyz on metricsAddr and /debug/pprof/ on pprofAddr.
	args func(b *bench, i int, metricsAddr, pprofAddr string) (bin string, args []string)
}

var costContenders = []costContender{
	{"stockflow worker", func(b *bench, i int, addr, pprof string) (string, []string) {
		return b.cfg.WorkerBin, []string{"--lock", "on", "--worker-name", "w" + strconv.Itoa(i), "--metrics-addr", addr,
			"--pprof-addr", pprof, "--redis-url", b.mainURL()}
	}},
	{"Watermill ack-only", func(b *bench, i int, addr, pprof string) (string, []string) {
		return b.cfg.ConsumerBin, []string{"--kind", "watermill", "--name", "c" + strconv.Itoa(i), "--metrics-addr", addr,
			"--pprof-addr", pprof, "--redis-url", b.mainURL()}
	}},
	{"minimal ideal", func(b *bench, i int, addr, pprof string) (string, []string) {
		return b.cfg.ConsumerBin, []string{"--kind", "ideal", "--name", "c" + strconv.Itoa(i), "--metrics-addr", addr,
			"--pprof-addr", pprof, "--redis-url", b.mainURL()}
	}},
}

func costTable(id, title string, orders int) *Table {
	return &Table{
		ID:    id,
		Title: "8. cost of an order, " + title,
		Setup: fmt.Sprintf("%d orders of 1 unit over 200 SKUs published while 2 consumer processes are stopped, then drained; per order", orders),
		Columns: []Column{{Key: "redis_cpu_us", Header: "Redis CPU µs", Digits: 1},
			{Key: "round_trips", Header: "round trips", Digits: 3}, {Key: "commands", Header: "commands", Digits: 2},
			{Key: "scripts", Header: "scripts", Digits: 3}, {Key: "consumer_cpu_us", Header: "consumer CPU µs", Digits: 1},
			{Key: "allocs", Header: "allocations", Digits: 0}, {Key: "orders_per_s", Header: "drain orders/s", Digits: 0}},
		RatioOf: "redis_cpu_us", RatioBase: costContenders[2].name,
	}
}

// cost is comparison 8: the contenders on single-SKU orders, uniform and hot, the worker on two-line
// baskets, then what idle workers cost.
func (b *bench) cost(ctx context.Context) error {
	if b.cfg.WorkerBin == "" || b.cfg.ConsumerBin == "" {
		b.progress("cost skipped: no worker or consumer binary (scripts/bench.sh builds them)")
		return nil
	}
	for _, wl := range []e2eWorkload{
		{"cost-uniform", "200 SKUs uniform", "uniform", b.cfg.CostOrders, 0},
		{"cost-hot", "200 SKUs, one hot SKU (half of the orders on SKU-0)", "hot", b.cfg.CostOrders, 0},
	} {
		t := b.addTable(costTable(wl.id, wl.title, wl.orders))
		contenders := slices.Clone(costContenders)
		if wl.id == "cost-uniform" {
			contenders = append(contenders, costContender{"stockflow worker, 2-line baskets", costContenders[0].args})
		}
		if base := b.cfg.BaseWorkerBin; base != "" {
			contenders = append(contenders, costContender{"base worker", func(b *bench, i int, addr, pprof string) (string, []string) {
				_, args := costContenders[0].args(b, i, addr, pprof)
				return base, args
			}})
		}
		err := interleave(b.cfg.Rounds, len(contenders), func(round, i int) error {
			c, w := contenders[i], wl
			if strings.HasSuffix(c.name, "baskets") {
				w.lines = 2
			}
			return b.costRound(ctx, t, w, c, round)
		})
		if err != nil {
			return err
		}
	}
	if err := b.lightCost(ctx); err != nil {
		return err
	}
	return b.idleCost(ctx)
}

// costRound drains wl's orders with 2 processes of c and records what it cost.
func (b *bench) costRound(ctx context.Context, t *Table, wl e2eWorkload, c costContender, round int) error {
	if err := b.main.FlushAll(ctx).Err(); err != nil {
		return err
	}
	procs, err := b.startConsumers(ctx, c, 2)
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	defer procs.kill()
	profiled := b.profileName(wl.id, c.name, round)
	v, top, err := b.drain(ctx, procs, wl, profiled)
	if err != nil {
		return fmt.Errorf("%s %s: %w", wl.id, c.name, err)
	}
	b.checks.expect(wl.id+" "+c.name+": consumers exit cleanly", procs.stop(30*time.Second) == nil, "round %d", round+1)
	b.progress("%s round %d/%d %-34s Redis %6.1f µs  %5.3f round trips  %5.2f commands  consumer %6.1f µs  %5.0f allocs  %6.0f orders/s",
		wl.id, round+1, b.cfg.Rounds, c.name, v["redis_cpu_us"], v["round_trips"], v["commands"], v["consumer_cpu_us"],
		v["allocs"], v["orders_per_s"])
	b.progress("%s round %d/%d %-34s per order, calls × µs each: %s", wl.id, round+1, b.cfg.Rounds, c.name, top)
	t.add(c.name, v)
	return nil
}

// startConsumers starts n processes of c and waits until they are ready.
func (b *bench) startConsumers(ctx context.Context, c costContender, n int) (benchWorkers, error) {
	var procs benchWorkers
	for i := range n {
		addr, err := childproc.FreeAddr()
		pprof, perr := childproc.FreeAddr()
		if err = cmp.Or(err, perr); err != nil {
			procs.kill()
			return nil, err
		}
		bin, args := c.args(b, i, addr, pprof)
		p, err := childproc.Start(exec.Command(bin, args...), filepath.Join(b.tmp, "consumer-"+strconv.Itoa(i)+".log"))
		if err != nil {
			procs.kill()
			return nil, err
		}
		b.cfg.notePid(p.Pid(), bin)
		procs = append(procs, &benchWorker{Process: p, metricsAddr: addr, pprofAddr: pprof})
	}
	if err := procs.waitReady(ctx); err != nil {
		procs.kill()
		return nil, err
	}
	return procs, nil
}

// drain publishes wl's orders while procs are stopped, then lets them drain the group and measures; top
// says which commands Redis spent the most time on.
func (b *bench) drain(ctx context.Context, procs benchWorkers, wl e2eWorkload, profiled string) (v map[string]float64, top string, err error) {
	allocs0 := procs.allocations()
	for _, p := range procs {
		_ = p.Pause()
	}
	if err := b.publishStaged(ctx, wl); err != nil {
		return nil, "", err
	}
	if err := b.main.ConfigResetStat(ctx).Err(); err != nil {
		return nil, "", err
	}
	var elapsed time.Duration
	cpu, err := b.measureCPU(ctx, []string{b.mainAddr}, procs.pids(), func() error {
		start := time.Now()
		for _, p := range procs {
			_ = p.Resume()
		}
		profiles := procs.profile(profiled, b.cfg.ProfileSeconds)
		err := b.waitDrained(ctx, int64(wl.orders))
		elapsed = time.Since(start)
		return errors.Join(err, profiles())
	})
	if err != nil {
		return nil, "", err
	}
	stats, err := b.commandStats(ctx)
	if err != nil {
		return nil, "", err
	}
	n := float64(wl.orders)
	v = map[string]float64{
		"redis_cpu_us": float64(cpu.redis.Microseconds()) / n, "consumer_cpu_us": float64(cpu.procs.Microseconds()) / n,
		"round_trips": stats.reads / n, "commands": stats.commands / n, "scripts": stats.scripts / n,
		"allocs": (procs.allocations() - allocs0) / n, "orders_per_s": n / elapsed.Seconds(),
	}
	return v, stats.topCommands(n, 6), nil
}

// publishStaged publishes wl's orders to a stream of their own, then renames it to "orders" in one step,
// with the consumer groups the consumers made at their start, reading from its beginning. Published to
// "orders" itself, each order's keyspace event would queue for a stopped worker subscribed to them (an idle
// worker is), to be received during the drain: 20,000 messages that no running worker receives, since it
// unsubscribes once it has entries to read. The rename publishes no keyspace event the worker subscribes to
// (it asks for stream events only): the harness publishes the one an XADD would.
func (b *bench) publishStaged(ctx context.Context, wl e2eWorkload) error {
	const staging = "orders-staging"
	groups, err := b.main.XInfoGroups(ctx, "orders").Result()
	if err != nil && !redis.HasErrorPrefix(err, "ERR no such key") {
		return err
	}
	for _, g := range groups {
		if err := b.main.XGroupCreateMkStream(ctx, staging, g.Name, "0").Err(); err != nil {
			return err
		}
	}
	cfg := b.producerConfig(b.single(1), wl)
	cfg.Wait = false
	cfg.OrdersStream = staging
	if _, err := producer.Run(ctx, cfg, nil); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if err := b.main.Rename(ctx, staging, "orders").Err(); err != nil {
		return err
	}
	return b.main.Publish(ctx, redisstream.KeyspaceChannel(0, "orders"), "xadd").Err()
}

// waitDrained waits until the group of the orders has read every one of the orders and has none pending.
func (b *bench) waitDrained(ctx context.Context, orders int64) error {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		groups, err := b.main.XInfoGroups(ctx, "orders").Result()
		if err != nil {
			return err
		}
		if len(groups) == 1 && groups[0].EntriesRead >= orders && groups[0].Pending == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the group did not drain %d orders within 3 minutes", orders)
}

// redisStats are counts since the last CONFIG RESETSTAT: reads of client sockets (round trips), commands
// (those run inside scripts included), script calls, and each command's calls and microseconds (a
// script's usec include those of the commands it ran).
type redisStats struct {
	reads, commands, scripts float64
	byCommand                map[string]commandStat
}

type commandStat struct{ calls, usec float64 }

func (b *bench) commandStats(ctx context.Context) (redisStats, error) {
	var s redisStats
	stats, err := b.main.Info(ctx, "stats").Result()
	if err != nil {
		return s, err
	}
	s.reads, _ = strconv.ParseFloat(infoFields(stats)["total_reads_processed"], 64)
	cmds, err := b.main.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, err
	}
	s.byCommand = map[string]commandStat{}
	for name, v := range infoFields(cmds) {
		calls, usec := commandField(v, "calls="), commandField(v, "usec=")
		s.byCommand[strings.TrimPrefix(name, "cmdstat_")] = commandStat{calls, usec}
		s.commands += calls
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			s.scripts += calls
		}
	}
	return s, nil
}

// commandField reads a field (calls=N, usec=N) of a commandstats line.
func commandField(v, prefix string) float64 {
	for _, field := range strings.Split(v, ",") {
		if n, ok := strings.CutPrefix(field, prefix); ok {
			f, _ := strconv.ParseFloat(n, 64)
			return f
		}
	}
	return 0
}

// topCommands says, per order, the calls and Redis µs of the commands that took the most time, costliest
// first: where a contender's Redis time goes.
func (s redisStats) topCommands(orders float64, n int) string {
	names := slices.Collect(maps.Keys(s.byCommand))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(s.byCommand[b].usec, s.byCommand[a].usec) })
	var parts []string
	for _, name := range names[:min(n, len(names))] {
		c := s.byCommand[name]
		parts = append(parts, fmt.Sprintf("%s %.2f×%.1fµs", name, c.calls/orders, c.usec/c.calls))
	}
	return strings.Join(parts, ", ")
}

// profileName is the file name prefix of a cost round's CPU profiles, "" when the run takes none.
func (b *bench) profileName(workload, contender string, round int) string {
	if b.cfg.ProfileDir == "" {
		return ""
	}
	name := strings.NewReplacer(" ", "-", ",", "").Replace(contender)
	return filepath.Join(b.cfg.ProfileDir, fmt.Sprintf("%s-%s-%d", workload, name, round+1))
}

// profile takes a CPU profile of each process over the next seconds, written to prefix-<i>.pprof; the
// function returned waits for them. An empty prefix takes none.
func (ws benchWorkers) profile(prefix string, seconds int) (wait func() error) {
	if prefix == "" {
		return func() error { return nil }
	}
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			errs[i] = fetchTo(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.pprofAddr, seconds),
				fmt.Sprintf("%s-%d.pprof", prefix, i))
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// fetchTo writes the body of a GET of url to the file path.
func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// allocations is the sum of the processes' heap allocations so far (runtime.MemStats.Mallocs, from the
// "# Mallocs = N" line of /debug/pprof/heap?debug=1: exact, where the runtime metrics on /metrics are read
// at most every 15 s).
func (ws benchWorkers) allocations() float64 {
	var sum float64
	client := &http.Client{Timeout: 5 * time.Second}
	for _, w := range ws {
		resp, err := client.Get("http://" + w.pprofAddr + "/debug/pprof/heap?debug=1")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if n, ok := strings.CutPrefix(line, "# Mallocs = "); ok {
				v, _ := strconv.ParseFloat(n, 64)
				sum += v
			}
		}
	}
	return sum
}

// Light load, many workers: 8 worker processes on one partition, mostly idle, each entry's keyspace
// event reaching every one of them.
const (
	lightWorkers = 8
	lightRate    = 1000 // orders/s
)

// lightCost is a table of comparison 8: what an order costs Redis when the workers are many and mostly
// idle, with reads of fetch.lua per order (an entry read by every idle worker is lightWorkers of them),
// and its latency; the base worker as well when the run has one.
func (b *bench) lightCost(ctx context.Context) error {
	orders := max(b.cfg.CostOrders/2, 2000)
	t := b.addTable(&Table{ID: "cost-light", Title: "8. cost of an order: many workers, light load",
		Setup: fmt.Sprintf("%d worker processes, 1 partition, %d orders at %d/s over 200 SKUs, uniform", lightWorkers, orders, lightRate),
		Columns: []Column{{Key: "redis_cpu_us", Header: "Redis CPU µs/order", Digits: 1},
			{Key: "reads", Header: "fetch.lua reads/order", Digits: 2},
			{Key: "p50_ms", Header: "p50 latency ms", Digits: 2}, {Key: "p99_ms", Header: "p99 latency ms", Digits: 1}}})
	bins := []struct{ name, bin string }{{costContenders[0].name, b.cfg.WorkerBin}}
	if b.cfg.BaseWorkerBin != "" {
		bins = append(bins, struct{ name, bin string }{"base worker", b.cfg.BaseWorkerBin})
	}
	wl := e2eWorkload{id: "cost-light", distribution: "uniform", orders: orders}
	return interleave(b.cfg.Rounds, len(bins), func(round, i int) error {
		if err := b.main.FlushAll(ctx).Err(); err != nil {
			return err
		}
		c := costContender{bins[i].name, func(b *bench, k int, addr, _ string) (string, []string) {
			return bins[i].bin, []string{"--lock", "on", "--worker-name", "w" + strconv.Itoa(k), "--metrics-addr", addr,
				"--redis-url", b.mainURL()}
		}}
		procs, err := b.startConsumers(ctx, c, lightWorkers)
		if err != nil {
			return err
		}
		defer procs.kill()
		// Past the start: the group, first reads, subscriptions, and the others seen. A worker learns the live
		// ones every 5 s (redisstream's liveEvery); until then the first ones to start may each own the
		// partition and read on each order's event, several reads an order instead of about two.
		time.Sleep(6 * time.Second)
		_ = b.main.ConfigResetStat(ctx).Err()
		cfg := b.producerConfig(b.single(1), wl)
		cfg.Rate = lightRate
		var sum *producer.Summary
		cpu, err := b.measureCPU(ctx, []string{b.mainAddr}, nil, func() (err error) {
			sum, err = producer.Run(ctx, cfg, nil)
			return err
		})
		if err != nil {
			return err
		}
		stats, err := b.commandStats(ctx)
		if err != nil {
			return err
		}
		b.checks.expect("cost-light "+c.name+": every order decided once", sum.Consistent, "round %d: %v", round+1, sum.Problems)
		n := float64(orders)
		v := map[string]float64{"redis_cpu_us": float64(cpu.redis.Microseconds()) / n,
			"reads":  stats.byCommand["xreadgroup"].calls / n,
			"p50_ms": float64(sum.LatencyP50.Microseconds()) / 1000, "p99_ms": float64(sum.LatencyP99.Microseconds()) / 1000}
		b.progress("cost-light round %d/%d %-20s Redis %6.1f µs  %5.2f reads  p50 %5.2f ms  p99 %6.1f ms", round+1,
			b.cfg.Rounds, c.name, v["redis_cpu_us"], v["reads"], v["p50_ms"], v["p99_ms"])
		b.progress("cost-light round %d/%d %-20s per order, calls × µs each: %s", round+1, b.cfg.Rounds, c.name, stats.topCommands(n, 12))
		t.add(c.name, v)
		return procs.stop(30 * time.Second)
	})
}

// idleCost is the last table of comparison 8: Redis CPU of 4 idle workers over 16 partitions, waiting for
// keyspace events or polling.
func (b *bench) idleCost(ctx context.Context) error {
	t := b.addTable(&Table{ID: "cost-idle", Title: "8. cost of an order: idle workers",
		Setup: "4 worker processes, 16 partitions, no orders: Redis CPU over 10 s",
		Columns: []Column{{Key: "redis_cpu_pct", Header: "Redis CPU % of a core", Digits: 2},
			{Key: "commands_per_s", Header: "commands/s", Digits: 0}}})
	modes := []struct{ name, events string }{{"keyspace events (default)", "auto"}, {"polling (KEYSPACE_EVENTS=off)", "off"}}
	return interleave(b.cfg.Rounds, len(modes), func(round, i int) error {
		if err := b.main.FlushAll(ctx).Err(); err != nil {
			return err
		}
		c := costContender{modes[i].name, func(b *bench, k int, addr, _ string) (string, []string) {
			return b.cfg.WorkerBin, []string{"--worker-name", "w" + strconv.Itoa(k), "--metrics-addr", addr,
				"--redis-url", b.mainURL(), "--orders-partitions", "16", "--keyspace-events", modes[i].events}
		}}
		procs, err := b.startConsumers(ctx, c, 4)
		if err != nil {
			return err
		}
		defer procs.kill()
		time.Sleep(time.Second) // past the start: groups created, first reads, subscriptions
		_ = b.main.ConfigResetStat(ctx).Err()
		cpu, err := b.measureCPU(ctx, []string{b.mainAddr}, nil, func() error { time.Sleep(idleWindow); return nil })
		if err != nil {
			return err
		}
		stats, err := b.commandStats(ctx)
		if err != nil {
			return err
		}
		v := map[string]float64{"redis_cpu_pct": 100 * cpu.redis.Seconds() / idleWindow.Seconds(),
			"commands_per_s": stats.commands / idleWindow.Seconds()}
		b.progress("cost-idle round %d/%d %-30s Redis %5.2f %% of a core, %5.0f commands/s; per s, calls × µs each: %s", round+1, b.cfg.Rounds,
			modes[i].name, v["redis_cpu_pct"], v["commands_per_s"], stats.topCommands(idleWindow.Seconds(), 5))
		t.add(modes[i].name, v)
		return procs.stop(30 * time.Second)
	})
}

const idleWindow = 10 * time.Second
