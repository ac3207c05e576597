package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// startWorker runs the worker binary with the test's environment plus env until the test ends, serving
// on METRICS_ADDR :port (as compose.yaml sets it), and returns the port.
func startWorker(t *testing.T, bin string, env ...string) string {
	t.Helper()
	addr, err := childproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "METRICS_ADDR=:"+port), env...)
	p, err := childproc.Start(cmd, filepath.Join(t.TempDir(), "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// One stopped while it waits for Redis exits 1: only a worker that does not stop is an error here.
		var exit *exec.ExitError
		if err := p.Stop(30 * time.Second); err != nil && !errors.As(err, &exit) {
			t.Errorf("worker: %v; its log:\n%s", err, p.Log())
		}
	})
	return port
}

// waitFor polls ok for up to 30 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// worker probe, compose.yaml's healthcheck: 0 once a worker is ready, whatever the probe's environment says
// of Redis; 1, with the reason on the last line, while the worker waits for Redis (its /healthz answers
// then: the probe asks /readyz) and when nothing listens; 2 without METRICS_ADDR.
func TestWorkerProbeExitsZeroOnlyForAReadyWorker(t *testing.T) {
	bin := clitest.Build(t, ".")
	token := "METRICS_TOKEN=0123456789abcdef-probe" // guards /metrics only: the probe sends none
	ready := startWorker(t, bin, "REDIS_URL="+redistest.Start(t).URL(), token)
	// Settings the worker would refuse, Redis's among them: the probe reads METRICS_ADDR only.
	unrelated := []string{"REDIS_URL=http://not-redis", "WORKER_CONCURRENCY=0", "WORKER_CONCURENCY=4", token}
	var r clitest.Result
	waitFor(t, "worker probe exits 0", func() bool {
		r = clitest.Run(t, bin, append([]string{"METRICS_ADDR=:" + ready}, unrelated...), "probe")
		return r.Code == 0
	})
	if r.Stdout != "" || r.Stderr != "" {
		t.Errorf("a ready worker: the probe wrote %q on stdout and %q on stderr, want nothing", r.Stdout, r.Stderr)
	}

	waiting := startWorker(t, bin, "REDIS_URL="+closedURL(t), "STARTUP_TIMEOUT=1m")
	waitFor(t, "the waiting worker's /healthz answers", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + waiting + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	nothing, err := childproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		says string
	}{
		{"a worker waiting for Redis is not ready", []string{"METRICS_ADDR=:" + waiting}, nil, 1, "503 Service Unavailable: not ready: router not running"},
		{"an address nothing listens on is no ready worker", []string{"METRICS_ADDR=" + nothing}, nil, 1, "connection refused"},
		{"the flag overrides the environment", []string{"METRICS_ADDR=:" + ready}, []string{"--metrics-addr", nothing}, 1, "connection refused"},
		{"without METRICS_ADDR there is nothing to ask", []string{"METRICS_ADDR="}, nil, 2, "METRICS_ADDR is not set"},
		{"an argument is refused", []string{"METRICS_ADDR=:" + ready}, []string{"now"}, 2, `unexpected argument "now"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := clitest.Run(t, bin, tc.env, append([]string{"probe"}, tc.args...)...)
			if recs := clitest.Exited(t, r, tc.code, tc.says); len(recs) != 1 {
				t.Errorf("the probe wrote %d lines, want one:\n%s", len(recs), r.Stderr)
			}
		})
	}
}
