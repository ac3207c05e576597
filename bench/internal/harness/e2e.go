package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/internal/worker"
)

// e2eMode is one way the bench worker takes its SKU locks (its --lock flag).
type e2eMode struct{ flag, name string }

var e2eModes = []e2eMode{
	{"on", "lock on (stockflow)"},
	{"off", "lock off"},
	{"redsync", "lock on (redsync)"},
}

// endToEnd is comparison 5: 2 worker processes x 16 consumers, orders from the producer, each lock mode.
func (b *bench) endToEnd(ctx context.Context) error {
	if b.cfg.WorkerBin == "" {
		b.progress("e2e skipped: no worker binary (scripts/bench.sh builds it)")
		return nil
	}
	workloads := []struct {
		id, title, distribution string
		orders                  int
	}{
		{"e2e-uniform", "200 SKUs uniform", "uniform", b.cfg.E2EOrders},
		{"e2e-hot", "200 SKUs, one hot SKU (half of the orders on SKU-0)", "hot", b.cfg.E2EHotOrders},
	}
	for _, wl := range workloads {
		seed := wl.orders / 200 // the average SKU about sells out; the hot one rejects most of its orders
		t := &Table{
			ID:    wl.id,
			Title: fmt.Sprintf("5. end to end, 2 worker processes x 16 consumers, %s", wl.title),
			Setup: fmt.Sprintf("%d orders of 1 unit from the producer (8 publishers, no rate limit), %d units per SKU; orders/s from the first order placed to the last outcome",
				wl.orders, seed),
			Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "latency_p50_ms", Header: "p50 latency ms", Digits: 1},
				{Key: "latency_p99_ms", Header: "p99 latency ms", Digits: 1}, {Key: "lock_wait_p99_ms", Header: "p99 lock wait ms", Digits: 1},
				{Key: "redis_cpu_us", Header: "Redis CPU µs/order", Digits: 0},
				{Key: "worker_cpu_us", Header: "workers CPU µs/order", Digits: 0},
				{Key: "rss_mib", Header: "worker peak RSS MiB", Digits: 1}},
			RatioOf: "orders_per_s", RatioBase: e2eModes[0].name,
		}
		b.report.Tables = append(b.report.Tables, t)
		err := interleave(b.cfg.Rounds, len(e2eModes), func(round, i int) error {
			mode := e2eModes[i]
			res, err := b.e2eRun(ctx, mode.flag, wl.distribution, wl.orders, seed)
			if err != nil {
				return fmt.Errorf("%s %s: %w", wl.id, mode.name, err)
			}
			sum := res.sum
			values := map[string]float64{
				"orders_per_s":     sum.Throughput,
				"latency_p50_ms":   float64(sum.LatencyP50) / 1e6,
				"latency_p99_ms":   float64(sum.LatencyP99) / 1e6,
				"lock_wait_p99_ms": sum.LockWait.P99,
				"rss_mib":          res.rssMiB,
				"redis_cpu_us":     float64(res.redisCPU.Microseconds()) / float64(wl.orders),
				"worker_cpu_us":    float64(res.workerCPU.Microseconds()) / float64(wl.orders),
			}
			t.add(mode.name, values)
			b.progress("%s round %d/%d %-22s %7.0f orders/s  latency p50 %7.1f ms p99 %7.1f ms  lock wait p99 %7.1f ms  RSS %.1f MiB",
				wl.id, round+1, b.cfg.Rounds, mode.name, sum.Throughput, values["latency_p50_ms"], values["latency_p99_ms"],
				sum.LockWait.P99, res.rssMiB)
			name := wl.id + " " + mode.name
			b.checks.expect(name+": consistency check of the producer", sum.Consistent && sum.Missing == 0 && sum.Poisoned == 0,
				"round %d: %d missing, %d poisoned, problems: %s", round+1, sum.Missing, sum.Poisoned, strings.Join(sum.Problems, "; "))
			b.checks.expect(name+": workers exit cleanly", res.exitErr == nil, "round %d: %v", round+1, res.exitErr)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

type e2eResult struct {
	sum       *producer.Summary
	redisCPU  time.Duration // CPU time Redis spent during the producer's run
	workerCPU time.Duration // CPU time both workers spent during it
	rssMiB    float64       // the larger peak RSS of the two workers
	exitErr   error
}

// e2eRun runs one round on an emptied Redis: start 2 workers, produce and wait, read their peak RSS, stop
// them with SIGTERM.
func (b *bench) e2eRun(ctx context.Context, lockFlag, distribution string, orders, seed int) (e2eResult, error) {
	var res e2eResult
	if err := b.main.FlushAll(ctx).Err(); err != nil {
		return res, err
	}
	url := "redis://" + b.mainAddr + "/0"
	var workers []*proc
	defer func() { // on an early return: kill what runs
		for _, w := range workers {
			w.kill()
		}
	}()
	var addrs []string
	for i := range 2 {
		port, err := freePort()
		if err != nil {
			return res, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		logf, err := os.OpenFile(filepath.Join(b.tmp, "worker-"+strconv.Itoa(i)+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return res, err
		}
		cmd := exec.Command(b.cfg.WorkerBin, "--lock", lockFlag, "--redis-url", url, "--worker-name", "w"+strconv.Itoa(i),
			"--metrics-addr", addr)
		cmd.Stdout, cmd.Stderr = logf, logf
		err = redisproc.StartChild(cmd)
		logf.Close()
		if err != nil {
			return res, err
		}
		if b.cfg.OnPid != nil {
			b.cfg.OnPid(cmd.Process.Pid, b.cfg.WorkerBin)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		go func() { p.err = cmd.Wait(); close(p.done) }()
		workers, addrs = append(workers, p), append(addrs, addr)
	}
	for i, addr := range addrs {
		if err := waitHTTPReady(ctx, "http://"+addr+"/readyz", workers[i].done); err != nil {
			return res, fmt.Errorf("worker %d: %w; log: %s", i, err, b.logTail(i))
		}
	}
	redisCPU0, err := b.redisCPU(ctx, b.mainAddr)
	if err != nil {
		return res, err
	}
	var workerCPU0 time.Duration
	for _, w := range workers {
		workerCPU0 += processCPU(w.cmd.Process.Pid)
	}
	sum, err := producer.Run(ctx, producer.Config{
		Streams: worker.Streams{RedisURL: url, OrdersStream: "orders", ResultsStream: "order-results", PoisonStream: "orders-poison",
			ConsumerGroup: "inventory"},
		Orders: orders, SKUs: 200, Quantity: 1, Distribution: distribution, SeedStock: seed,
		Wait: true, Timeout: 3 * time.Minute,
	}, nil)
	if err != nil {
		return res, fmt.Errorf("producer: %w", err)
	}
	res.sum = sum
	redisCPU1, err := b.redisCPU(ctx, b.mainAddr)
	if err != nil {
		return res, err
	}
	res.redisCPU = redisCPU1 - redisCPU0
	for _, w := range workers {
		res.workerCPU += processCPU(w.cmd.Process.Pid)
	}
	res.workerCPU -= workerCPU0
	for _, w := range workers {
		if kib, err := peakRSSKiB(w.cmd.Process.Pid); err == nil {
			res.rssMiB = max(res.rssMiB, float64(kib)/1024)
		}
	}
	var exitErrs []error
	for i, w := range workers {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
			if w.err != nil {
				exitErrs = append(exitErrs, fmt.Errorf("worker %d: %w; log: %s", i, w.err, b.logTail(i)))
			}
		case <-time.After(30 * time.Second):
			w.kill()
			exitErrs = append(exitErrs, fmt.Errorf("worker %d did not stop within 30s of SIGTERM", i))
		}
	}
	workers = nil
	res.exitErr = errors.Join(exitErrs...)
	return res, nil
}

func (b *bench) logTail(i int) string {
	data, _ := os.ReadFile(filepath.Join(b.tmp, "worker-"+strconv.Itoa(i)+".log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// proc is a child process and its exit.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited; err is then its exit error
	err  error
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func waitHTTPReady(ctx context.Context, url string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			return errors.New("exited during start")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("not ready after 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
