package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// runStockctl runs the binary with REDIS_URL=url and returns its exit code and output.
func runStockctl(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(buildStockctl(t), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run stockctl %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

func TestStockctlExitCodes(t *testing.T) {
	s := redistest.Start(t)
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "redis://" + l.Addr().String() + "/0"
	}()
	for _, c := range []struct {
		name string
		url  string
		args []string
		code int
		says string // in stdout for 0, otherwise in the err of the last line of stderr (a JSON log)
	}{
		{"-h prints the usage", s.URL(), []string{"-h"}, 0, "Exit codes:"},
		{"stock set writes", s.URL(), []string{"stock", "set", "SKU-1", "7"}, 0, "SKU-1  7"},
		{"stock reads", s.URL(), []string{"stock", "SKU-1"}, 0, "SKU-1  7"},
		{"an unreachable Redis is a failure", closed, []string{"stock", "SKU-1"}, 1, "connection refused"},
		{"an unknown command is a usage error, with a suggestion", s.URL(), []string{"stok", "SKU-1"}, 2, "unknown command \"stok\" for \"stockctl\"\n\nDid you mean this?\n\tstock"},
		{"a bare list command lists", s.URL(), []string{"stock"}, 0, "SKU-1  7"},
		{"a bad number is a usage error", s.URL(), []string{"stock", "add", "SKU-1", "x"}, 2, `invalid N "x"`},
		{"an unknown SKU is not found", s.URL(), []string{"stock", "NOPE"}, 3, "unknown SKU"},
		{"a missing stream is not found", s.URL(), []string{"pending"}, 3, `stream "orders" does not exist`},
	} {
		code, stdout, stderr := runStockctl(t, c.url, c.args...)
		text := stdout
		if c.code != 0 {
			recs := clitest.JSONLines(t, stderr)
			text, _ = recs[len(recs)-1]["err"].(string)
		}
		if code != c.code || !strings.Contains(text, c.says) {
			t.Errorf("%s: exit code %d, want %d with %q\nstdout: %s\nstderr: %s", c.name, code, c.code, c.says, stdout, stderr)
		}
	}
}

// An order poisoned because its SKU's stock was corrupt is replayed after an operator repaired the stock,
// and the worker reserves it once.
func TestStockctlReplayAfterRepair(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{BAD}", "available", "12.5")
	startWorker(t, s, "w0", "WORKER_CONCURRENCY=2", "MAX_ATTEMPTS=1")
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", `{"order_id":"o-1","sku":"BAD","quantity":2}`}})
	stockctlWait(t, 20*time.Second, "the order is poisoned", func() bool { return rdb.XLen(ctx, "orders-poison").Val() == 1 })

	if code, _, stderr := runStockctl(t, s.URL(), "stock", "set", "BAD", "10"); code != 0 {
		t.Fatalf("stock set: exit code %d: %s", code, stderr)
	}
	code, stdout, stderr := runStockctl(t, s.URL(), "poison", "replay", "--reason-contains", "available", "--json")
	var rep struct{ Replayed int }
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 || rep.Replayed != 1 {
		t.Fatalf("replay: exit code %d, replayed %d (%v)\nstdout: %s\nstderr: %s", code, rep.Replayed, err, stdout, stderr)
	}
	stockctlWait(t, 20*time.Second, "the replayed order is reserved", func() bool {
		return rdb.HGet(ctx, "stock:{BAD}", "reserved").Val() == "2"
	})
	if got := rdb.HGet(ctx, "stock:{BAD}", "available").Val(); got != "8" || rdb.XLen(ctx, "orders-poison").Val() != 0 {
		t.Fatalf("available %s, %d poison entries; want 8 and none", got, rdb.XLen(ctx, "orders-poison").Val())
	}
}

func stockctlWait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
	}
}
