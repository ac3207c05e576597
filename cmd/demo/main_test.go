package main

import (
	"strings"
	"testing"

	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// The demo's exit codes, and every line it writes to stderr being JSON (stderr is no terminal here): 2 for
// a setting or argument it refused, with the one meant; 1 for a run that failed; 0 for a run that passed,
// its summary on stdout.
func TestDemoExitCodesAndJSONLines(t *testing.T) {
	bin := clitest.Build(t, ".")
	closed := "REDIS_URL=redis://" + redistest.ClosedAddr(t) + "/0"
	small := []string{"--workers", "1", "--orders", "50", "--skus", "3", "--stock", "10", "--lines", ""}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		says string // in the last line's err; "" for a run that logs nothing
	}{
		{"an argument exits 2", nil, []string{"run"}, 2, `unexpected argument "run"`},
		{"a misspelt flag exits 2 naming the one meant", nil, []string{"--worker", "2"}, 2, "did you mean --workers?"},
		{"a value that cannot work exits 2", nil, []string{"--workers", "0"}, 2, "--workers and --concurrency must be at least 1"},
		{"a Redis that does not answer exits 1", []string{closed}, small, 1, "connection refused"},
		{"a run that passes exits 0", nil, append([]string{"--redis", "server"}, small...), 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := clitest.Run(t, bin, tc.env, tc.args...)
			if tc.says == "" {
				if r.Code != 0 {
					t.Fatalf("exit code %d, want 0; stderr:\n%s", r.Code, r.Stderr)
				}
				if !strings.HasSuffix(r.Stdout, "consistency check: PASS\n") {
					t.Fatalf("stdout:\n%s\nwant the summary of a run that passed", r.Stdout)
				}
				if r.Stderr != "" {
					clitest.JSONLines(t, r.Stderr)
				}
				return
			}
			clitest.Exited(t, r, tc.code, tc.says)
		})
	}
}
