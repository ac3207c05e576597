// Package e2e runs the real worker and producer binaries against real redis-server processes.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/testkit/history"
	"github.com/stockflow/stockflow/testkit/redistest"
)

var bin struct {
	once                                          sync.Once
	worker, producer, demo, stockctl, faultWorker string
	err                                           error
}

// TestMain removes the binaries the tests built (about 180 MB a run).
func TestMain(m *testing.M) {
	code := m.Run()
	if bin.worker != "" {
		_ = os.RemoveAll(filepath.Dir(bin.worker))
	}
	os.Exit(code)
}

// binaries builds the commands once per test binary.
func binaries(t *testing.T) (worker, producer string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests build and run the binaries; skipped with -short")
	}
	bin.once.Do(func() {
		dir, err := os.MkdirTemp("", "stockflow-e2e-")
		if err != nil {
			bin.err = err
			return
		}
		for _, b := range []struct {
			out *string
			pkg string
		}{{&bin.worker, "../../cmd/worker"}, {&bin.producer, "../../cmd/producer"}, {&bin.demo, "../../cmd/demo"},
			{&bin.stockctl, "../../cmd/stockctl"}, {&bin.faultWorker, "../../testkit/faultworker"}} {
			*b.out = filepath.Join(dir, filepath.Base(b.pkg))
			out, pkg := *b.out, b.pkg
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				bin.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return bin.worker, bin.producer
}

// proc is a running worker process.
type proc struct {
	*childproc.Process
	t    *testing.T
	name string
	cmd  *exec.Cmd // what it runs; cmd.Process.Pid names it in /proc
}

// testEnv is the worker environment of the end-to-end tests: short leases and claim times, so crashes
// are recovered from within seconds. New groups start at 0: tests add entries right after starting a
// worker, possibly before it created the group.
// With s nil, REDIS_URL comes from the caller's entries (a cluster's).
func testEnv(s *redistest.Server) []string {
	env := []string{"WORKER_CONCURRENCY=8", "LOCK_LEASE=2s", "LOCK_WAIT=1s",
		"CLAIM_IDLE=3s", "SHUTDOWN_TIMEOUT=5s", "CONSUMER_GROUP_START=0"}
	if s != nil {
		env = append(env, "REDIS_URL="+s.URL())
	}
	return env
}

// buildDemo returns the demo binary.
func buildDemo(t *testing.T) string {
	binaries(t)
	return bin.demo
}

// buildStockctl returns the stockctl binary.
func buildStockctl(t *testing.T) string {
	binaries(t)
	return bin.stockctl
}

// startWorker starts a worker named name; extra environment entries override testEnv.
func startWorker(t *testing.T, s *redistest.Server, name string, extra ...string) *proc {
	t.Helper()
	return startWorkerArgs(t, s, name, nil, extra...)
}

// startWorkerArgs starts a worker with command-line arguments; it is killed when the test ends, and its log
// printed when the test failed.
func startWorkerArgs(t *testing.T, s *redistest.Server, name string, args []string, extra ...string) *proc {
	t.Helper()
	return startWorkerBin(t, "", s, name, args, extra...)
}

// startWorkerBin is startWorkerArgs with the worker binary at path ("": cmd/worker, or the fault tests'
// worker, testkit/faultworker, when an extra entry sets a FAULT_ setting).
func startWorkerBin(t *testing.T, path string, s *redistest.Server, name string, args []string, extra ...string) *proc {
	t.Helper()
	if path == "" {
		path, _ = binaries(t)
		if slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, "FAULT_") }) {
			path = bin.faultWorker
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(append(os.Environ(), testEnv(s)...), append([]string{"WORKER_NAME=" + name}, extra...)...)
	child, err := childproc.Start(cmd, filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Kill()
		if t.Failed() {
			t.Logf("log of worker %s (last 40 lines):\n%s", name, strings.Join(child.LogTail(40), "\n"))
		}
	})
	return &proc{Process: child, t: t, name: name, cmd: cmd}
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to worker %s: %v", sig, p.name, err)
	}
}

// pause stops the worker with SIGSTOP and waits until the kernel shows it stopped.
func (p *proc) pause() {
	p.signal(syscall.SIGSTOP)
	waitFor(p.t, 2*time.Second, "worker "+p.name+" is stopped", p.stopped)
}

// stopped reads the process state from /proc: T is stopped by a signal.
func (p *proc) stopped() bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		p.t.Fatalf("state of worker %s: %v", p.name, err)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	_, rest, _ := strings.Cut(string(stat[strings.LastIndexByte(string(stat), ')'):]), " ")
	return strings.HasPrefix(rest, "T")
}

// exited waits up to timeout for the process to end and returns its exit error.
func (p *proc) exited(timeout time.Duration) (error, bool) {
	exited, err := p.Wait(timeout)
	return err, exited
}

func (p *proc) logText() string { return p.Log() }

// produce runs the producer with --wait --json and returns its summary; it fails the test if the producer
// cannot run, but not when its consistency check fails (the caller asserts on the summary).
func produce(t *testing.T, s *redistest.Server, args ...string) *producer.Summary {
	t.Helper()
	return produceEnv(t, []string{"REDIS_URL=" + s.URL()}, args...)
}

// produceEnv is produce with the environment entries env (REDIS_URL among them).
func produceEnv(t *testing.T, env []string, args ...string) *producer.Summary {
	t.Helper()
	_, prod := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prod, append([]string{"--wait", "--json", "--wait-timeout", "90s"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var sum producer.Summary
	if jerr := json.Unmarshal(stdout.Bytes(), &sum); jerr != nil {
		t.Fatalf("producer: %v, output %q, stderr %s", err, stdout.String(), stderr.String())
	}
	if err != nil && sum.Consistent {
		t.Fatalf("producer exited with %v although its check passed; stderr %s", err, stderr.String())
	}
	if !sum.Consistent && err == nil {
		t.Fatal("producer exited 0 although its consistency check failed")
	}
	return &sum
}

// recording is the history directory of a test's workers (FAULT_HISTORY_DIR: a file per process), checked
// by testkit/history.
type recording struct{ dir string }

func newRecording(t *testing.T) *recording { return &recording{dir: t.TempDir()} }

// env is the worker setting that records into the directory.
func (r *recording) env() string { return "FAULT_HISTORY_DIR=" + r.dir }

// files are the history files recorded so far.
func (r *recording) files(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(r.dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// text is everything recorded so far, for waiting on an event and for failure messages.
func (r *recording) text(t *testing.T) string {
	var b strings.Builder
	for _, f := range r.files(t) {
		raw, _ := os.ReadFile(f)
		b.Write(raw)
	}
	return b.String()
}

// verify checks the recorded history (linearizable stock per SKU, fencing) from the stock the producer's
// run started with.
func (r *recording) verify(t *testing.T, sum *producer.Summary) {
	t.Helper()
	initial := map[string]int64{}
	for sku, s := range sum.SKUs {
		initial[sku] = s.Initial
	}
	history.Verify(t, r.files(t), initial)
}

// assertConsistent fails the test with the summary's problems.
func assertConsistent(t *testing.T, sum *producer.Summary) {
	t.Helper()
	if !sum.Consistent || sum.Missing > 0 {
		t.Fatalf("consistency check failed: %s (missing %d)", strings.Join(sum.Problems, "; "), sum.Missing)
	}
	if sum.Outcomes+sum.Poisoned != sum.Published {
		t.Fatalf("%d distinct outcomes + %d poisoned for %d published orders", sum.Outcomes, sum.Poisoned, sum.Published)
	}
}
