package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
)

// benchWorker is one bench worker process (bench/cmd/benchworker) of an end-to-end round.
type benchWorker struct {
	*childproc.Process
	metricsAddr string // serves /readyz
	pprofAddr   string // serves /debug/pprof/ (the cost comparison); "": none
}

// benchWorkers are the workers of one round.
type benchWorkers []*benchWorker

// startWorkers starts n workers with --lock lockFlag on site s and waits until all are ready.
func (b *bench) startWorkers(ctx context.Context, s site, lockFlag string, n int) (benchWorkers, error) {
	var workers benchWorkers
	for i := range n {
		w, err := b.startWorker(s, i, lockFlag)
		if err != nil {
			workers.kill()
			return nil, err
		}
		workers = append(workers, w)
	}
	if err := workers.waitReady(ctx); err != nil {
		workers.kill()
		return nil, err
	}
	return workers, nil
}

// startWorker starts worker i, named wi, its log in the run's temporary directory.
func (b *bench) startWorker(s site, i int, lockFlag string) (*benchWorker, error) {
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--lock", lockFlag, "--worker-name", "w" + strconv.Itoa(i), "--metrics-addr", addr}, s.args()...)
	cmd := exec.Command(b.cfg.WorkerBin, args...)
	p, err := childproc.Start(cmd, filepath.Join(b.tmp, "worker-"+strconv.Itoa(i)+".log"))
	if err != nil {
		return nil, err
	}
	b.cfg.notePid(p.Pid(), b.cfg.WorkerBin)
	return &benchWorker{Process: p, metricsAddr: addr}, nil
}

func (ws benchWorkers) waitReady(ctx context.Context) error {
	for i, w := range ws {
		if err := w.waitReady(ctx); err != nil {
			return fmt.Errorf("worker %d: %w; log: %s", i, err, w.logTail())
		}
	}
	return nil
}

// waitReady waits up to 15 s until the worker's /readyz answers 200.
func (w *benchWorker) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, 15*time.Second, errors.New("not ready after 15s"))
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	url := "http://" + w.metricsAddr + "/readyz"
	return w.WaitReady(ctx, 20*time.Millisecond, func(ctx context.Context) error { return httpOK(ctx, client, url) })
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func (w *benchWorker) logTail() string { return strings.Join(w.LogTail(5), " | ") }

func (ws benchWorkers) pids() []int {
	var pids []int
	for _, w := range ws {
		pids = append(pids, w.Pid())
	}
	return pids
}

// peakRSSMiB is the larger peak resident set of the workers (VmHWM), 0 when unknown.
func (ws benchWorkers) peakRSSMiB() float64 {
	peak := 0.0
	for _, w := range ws {
		if kib, err := peakRSSKiB(w.Pid()); err == nil {
			peak = max(peak, float64(kib)/1024)
		}
	}
	return peak
}

// stop stops every worker with SIGTERM, killing one that takes longer than grace; the error names every
// worker that did not exit 0.
func (ws benchWorkers) stop(grace time.Duration) error {
	var errs []error
	for i, w := range ws {
		if err := w.Stop(grace); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w; log: %s", i, err, w.logTail()))
		}
	}
	return errors.Join(errs...)
}

func (ws benchWorkers) kill() {
	for _, w := range ws {
		w.Kill()
	}
}
