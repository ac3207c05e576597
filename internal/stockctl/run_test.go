package stockctl_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/stockctl"
)

func TestHelpListsCommandsAndExitCodes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"--json", "help"}} {
		r := runArgs(t, args...)
		wantCode(t, r, stockctl.ExitOK)
		wantContains(t, "help", r.stdout, "\n  stock ", "\n  poison ", "\n  consumers ", "\n  completion ", "--redis-url",
			"env REDIS_URL", "--output format", "--json", "--timeout", "Exit codes:", "3  not found", "4  nothing done")
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "no command given"},
		{[]string{"stocks", "SKU-1"}, `unknown command "stocks" for "stockctl"`},
		{[]string{"poison", "purge"}, `unknown command "purge" for "stockctl poison"`},
		{[]string{"pending", "entries"}, `stockctl pending takes no arguments, got ["entries"]`},
		{[]string{"stock", "A", "--nope"}, "unknown flag: --nope"},
		{[]string{"lock", "A", "--limit", "5"}, "unknown flag: --limit"},
		{[]string{"stock", "A", "-o", "xml"}, "invalid -o xml: want text, wide, json or yaml"},
		{[]string{"stock", "A", "--json", "-o", "yaml"}, "--json is -o json"},
		{[]string{"pending", "--limit", "0"}, "invalid --limit 0"},
		{[]string{"stock", "A", "--timeout", "0s"}, "invalid --timeout"},
		{[]string{"stock", "A", "--timeout", "soon"}, `invalid argument "soon" for "--timeout"`},
		{[]string{"stock", "A", "--redis-url", "http://x"}, "invalid REDIS_URL"},
		{[]string{"lock", "A", "--redlock-urls", "redis://a:1,ftp://b"}, "invalid REDLOCK_URLS"},
		{[]string{"pending", "--orders-stream", ""}, "invalid ORDERS_STREAM"},
	} {
		r := runArgs(t, c.args...)
		if r.code != stockctl.ExitUsage {
			t.Errorf("%q: exit code %d, want %d (stderr %q)", c.args, r.code, stockctl.ExitUsage, r.stderr)
		}
		wantContains(t, strings.Join(c.args, " "), r.stderr, c.says)
	}
}

// Not parallel: it sets the environment.
func TestSettingsComeFromTheEnvironmentAndFlagsWin(t *testing.T) {
	e := newEnv(t)
	t.Setenv("REDIS_URL", e.srv.URL())
	wantCode(t, runArgs(t, "stock", "set", "SKU-1", "4"), stockctl.ExitOK)
	t.Setenv("POISON_STREAM", "other-poison")
	e.poison("bad input", "1-0", "payload", "{}") // in orders-poison
	r := runArgs(t, "poison", "list")
	wantContains(t, "poison list with POISON_STREAM=other-poison", r.stdout, "stream other-poison: 0 entries")
	r = runArgs(t, "poison", "list", "--poison-stream", "orders-poison")
	wantContains(t, "poison list with the flag", r.stdout, "stream orders-poison: 1 entries")

	t.Setenv("REDIS_URL", "nope://")
	r = runArgs(t, "stock", "SKU-1")
	wantCode(t, r, stockctl.ExitUsage)
	wantContains(t, "stderr", r.stderr, "REDIS_URL")
	wantCode(t, runArgs(t, "stock", "SKU-1", "--redis-url", e.srv.URL()), stockctl.ExitOK)
}

func TestRedisUnreachableExits1(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + l.Addr().String() + "/0"
	_ = l.Close()
	for _, args := range [][]string{{"stock", "SKU-1"}, {"stock", "set", "SKU-1", "1"}, {"lock", "SKU-1"},
		{"pending"}, {"poison", "list"}, {"poison", "replay", "--all"}, {"consumers", "prune"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel() // each waits out go-redis's dial retries
			r := runArgs(t, append(args, "--redis-url", url)...)
			if r.code != stockctl.ExitFailure || !strings.Contains(r.stderr, "refused") {
				t.Errorf("exit code %d, stderr %q; want %d and connection refused", r.code, r.stderr, stockctl.ExitFailure)
			}
		})
	}
}

func TestTimeoutBoundsAStalledRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.Pause()
	t.Cleanup(e.srv.Resume)
	start := time.Now()
	r := e.run("stock", "SKU-1", "--timeout", "300ms")
	if r.code != stockctl.ExitFailure || !strings.Contains(r.stderr, "deadline exceeded") {
		t.Fatalf("exit code %d, stderr %q; want %d and deadline exceeded", r.code, r.stderr, stockctl.ExitFailure)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("a 300ms timeout took %v", waited)
	}
}
