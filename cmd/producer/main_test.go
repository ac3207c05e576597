package main

import (
	"strings"
	"testing"

	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// The producer's exit codes, and every line it writes to stderr being JSON (stderr is no terminal here):
// 2 for a setting or argument it refused, with the one meant; 1 for a run that failed or whose stock does
// not add up; 0 for one that did what it was asked.
func TestProducerExitCodesAndJSONLines(t *testing.T) {
	bin := clitest.Build(t, ".")
	s := redistest.Start(t)
	closed := "REDIS_URL=redis://" + redistest.ClosedAddr(t) + "/0"
	here := "REDIS_URL=" + s.URL()
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		says string // in the last line's err; "" for a run that logs nothing
	}{
		{"a misspelt setting exits 2 naming the one meant", []string{here, "ORDERS_PARTITION=2"}, nil, 2, "did you mean ORDERS_PARTITIONS?"},
		{"an argument exits 2", []string{here}, []string{"publish"}, 2, `unexpected argument "publish"`},
		{"a misspelt flag exits 2 naming the one meant", []string{here}, []string{"--oders", "5"}, 2, "did you mean --orders?"},
		{"a value that cannot work exits 2", []string{here}, []string{"--orders", "-1"}, 2, "invalid --orders -1"},
		{"a Redis that does not answer exits 1", []string{closed}, []string{"--orders", "1"}, 1, "connection refused"},
		{"outcomes that never come exit 1", []string{here}, []string{"--orders", "3", "--wait", "--wait-timeout", "1s"}, 1, "the stock does not add up: 3 events have no outcome"},
		{"seeding exits 0", []string{here}, []string{"--orders", "0", "--skus", "2", "--seed-stock", "5"}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := clitest.Run(t, bin, tc.env, tc.args...)
			if tc.says == "" {
				if r.Code != 0 {
					t.Fatalf("exit code %d, want 0; stderr:\n%s", r.Code, r.Stderr)
				}
				if !strings.Contains(r.Stdout, "stock of 2 SKUs set to 5") {
					t.Errorf("seeding printed %q, want the line of what was seeded on stdout", r.Stdout)
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
