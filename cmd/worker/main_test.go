package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// closedURL is the URL of a Redis that does not answer: a loopback port that nothing listens on.
func closedURL(t *testing.T) string { return "redis://u:hunter2@" + redistest.ClosedAddr(t) + "/0" }

// The worker's exit codes, and every line it writes being JSON (standard error is no terminal here): 2 for
// a setting or argument it refused, with the one meant; 1 for a run that failed; 0 after -h.
func TestWorkerExitCodesAndJSONLines(t *testing.T) {
	bin := clitest.Build(t, ".")
	noRedis := []string{"REDIS_URL=" + closedURL(t), "STARTUP_TIMEOUT=2s"}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		says string // in the last line's err
	}{
		{"a misspelt setting exits 2 naming the one meant", []string{"WORKER_CONCURENCY=4"}, nil, 2, "did you mean WORKER_CONCURRENCY?"},
		{"an argument exits 2 naming the flag meant", nil, []string{"version"}, 2, `unexpected argument "version"`},
		{"a misspelt flag exits 2 naming the one meant", nil, []string{"--concurency", "4"}, 2, "did you mean --worker-concurrency?"},
		{"a value that cannot work exits 2", []string{"LOCK_WAIT=0s"}, nil, 2, "invalid LOCK_WAIT 0s: must be positive"},
		{"a Redis that does not answer within STARTUP_TIMEOUT exits 1", nil, nil, 1, "Redis did not answer within STARTUP_TIMEOUT (2s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := clitest.Run(t, bin, append(append([]string{}, noRedis...), tc.env...), tc.args...)
			clitest.Exited(t, r, tc.code, tc.says)
			if r.Stdout != "" || strings.Contains(r.Stderr, "hunter2") {
				t.Fatalf("stdout %q, stderr:\n%s\nwant nothing on stdout, no password", r.Stdout, r.Stderr)
			}
		})
	}
	if r := clitest.Run(t, bin, noRedis, "version"); !strings.Contains(r.Stderr, "did you mean --version?") {
		t.Errorf("worker version: %s; want it to suggest --version", r.Stderr)
	}
	if r := clitest.Run(t, bin, noRedis, "-h"); r.Code != 0 || !strings.Contains(r.Stderr, "--startup-timeout duration") ||
		!strings.Contains(r.Stderr, "\nworker probe asks the worker") {
		t.Errorf("worker -h: exit code %d, printed %s; want 0, the settings and the probe", r.Code, r.Stderr)
	}
}

// The start line names the Redis in use, without its password, where REDIS_URL came from, and the build.
func TestWorkerStartLineNamesTheRedis(t *testing.T) {
	bin := clitest.Build(t, ".")
	r := clitest.Run(t, bin, []string{"REDIS_URL=" + closedURL(t), "STARTUP_TIMEOUT=1s"})
	for _, rec := range clitest.JSONLines(t, r.Stderr) {
		if rec["msg"] != "worker started" {
			continue
		}
		redis, _ := rec["redis"].(string)
		build, _ := rec["build"].(map[string]any)
		if !strings.HasPrefix(redis, "redis://u:xxxxx@127.0.0.1:") || rec["redis_url_from"] != "REDIS_URL" || build["version"] == nil {
			t.Fatalf("start line %v: want the Redis with its password redacted, REDIS_URL as where it came from, and the build's version", rec)
		}
		return
	}
	t.Fatalf("no start line:\n%s", r.Stderr)
}

// A Redis that answers but may evict keys is a failed run (1), not a refused setting: the worker's
// settings are fine, the Redis is not.
func TestWorkerOnAnEvictingRedisExits1(t *testing.T) {
	bin := clitest.Build(t, ".")
	s := redistest.Start(t)
	if err := s.Client().ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	r := clitest.Run(t, bin, []string{"REDIS_URL=" + s.URL(), "STARTUP_TIMEOUT=10s"})
	if r.Code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", r.Code, r.Stderr)
	}
	clitest.Last(t, clitest.JSONLines(t, r.Stderr), "err", "maxmemory-policy allkeys-lru")
}
