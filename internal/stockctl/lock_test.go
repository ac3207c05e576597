package stockctl_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

type lockJSON struct {
	SKU        string `json:"sku"`
	LockKey    string `json:"lock_key"`
	CounterKey string `json:"counter_key"`
	StockFound bool   `json:"stock_found"`
	Fence      int64  `json:"fence"`
	Redlock    bool   `json:"redlock"`
	Nodes      []struct {
		Addr    string `json:"addr"`
		Holders []struct {
			Owner string `json:"owner"`
			Holds int64  `json:"holds"`
		} `json:"holders"`
		LeaseMS      int64  `json:"lease_remaining_ms"`
		Counter      *int64 `json:"counter"`
		CounterTTLMS *int64 `json:"counter_ttl_ms"`
	} `json:"nodes"`
	Warnings []string `json:"warnings"`
}

const staleWarning = "the next holder's writes will be refused as stale until the counter is raised"

func TestLockShowsHolderCounterAndFence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	locker := must(rlock.NewReentrant(e.rdb, rlock.Config{}))
	t.Cleanup(func() { _ = locker.Close() })
	wantCode(t, e.run("stock", "set", "SKU-1", "10"), stockctl.ExitOK)

	owner := rlock.WithOwner(ctx, "worker-a:order-1")
	lease := must(locker.Acquire(owner, "SKU-1"))
	reentry := must(locker.Acquire(owner, "SKU-1"))
	if _, err := inventory.New(e.rdb).Reserve(lease.Context(), inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, lease.Token()); err != nil {
		t.Fatal(err)
	}

	var got lockJSON
	wantCode(t, e.runJSON(&got, "lock", "SKU-1"), stockctl.ExitOK)
	if got.LockKey != "lock:{SKU-1}" || got.CounterKey != "redisson_lock_token:lock:{SKU-1}" || len(got.Nodes) != 1 {
		t.Fatalf("keys or nodes wrong: %+v", got)
	}
	n := got.Nodes[0]
	if len(n.Holders) != 1 || n.Holders[0].Owner != "worker-a:order-1" || n.Holders[0].Holds != 2 {
		t.Fatalf("holders = %+v, want worker-a:order-1 holding 2", n.Holders)
	}
	if n.LeaseMS <= 0 || n.LeaseMS > rlock.DefaultLease.Milliseconds() {
		t.Fatalf("lease remaining %d ms, want 0 < lease <= %v", n.LeaseMS, rlock.DefaultLease)
	}
	if n.Counter == nil || *n.Counter != lease.Token() || got.Fence != lease.Token() || len(got.Warnings) != 0 {
		t.Fatalf("counter %v, fence %d, warnings %q; want both %d and no warning", n.Counter, got.Fence, got.Warnings, lease.Token())
	}
	text := e.run("lock", "SKU-1").stdout
	wantContains(t, "lock output", text, "held by worker-a:order-1 (holds 2)", "stock:{SKU-1} fence: 1")

	// A counter at the fence's - 1 is fine: the next holder's token is the fence (an elided batch leaves
	// them so).
	_ = reentry.Release(ctx)
	_ = lease.Release(ctx)
	must(e.rdb.HSet(ctx, "stock:{SKU-1}", "fence", 2).Result())
	if r := e.runJSON(&got, "lock", "SKU-1"); r.code != stockctl.ExitOK || len(got.Warnings) != 0 {
		t.Fatalf("counter 1, fence 2: exit %d, warnings %q; want none", r.code, got.Warnings)
	}

	// A counter lost (deleted, expired, a Redis restarted empty) falls below the stored fence.
	must(e.rdb.Del(ctx, got.CounterKey).Result())
	r := e.runJSON(&got, "lock", "SKU-1")
	wantCode(t, r, stockctl.ExitOK)
	if got.Nodes[0].Counter != nil || len(got.Nodes[0].Holders) != 0 || len(got.Warnings) != 1 ||
		!strings.Contains(got.Warnings[0], staleWarning) {
		t.Fatalf("after the counter was deleted: node %+v, warnings %q; want free, no counter, the stale warning", got.Nodes[0], got.Warnings)
	}
	text = e.run("lock", "SKU-1").stdout
	wantContains(t, "lock output", text, "lock:{SKU-1} on", "free", "missing", "WARNING: ", staleWarning)
}

func TestLockOfUnknownOrInvalidSKU(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("lock", "NOPE")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stderr", r.stderr, `nothing known about SKU "NOPE"`)
	wantCode(t, e.run("lock", "a{b}"), stockctl.ExitUsage)
	wantCode(t, e.run("lock"), stockctl.ExitUsage)

	// A counter alone (the stock was never set) is something known.
	must(e.rdb.Set(context.Background(), "redisson_lock_token:lock:{ONLY}", 4, 0).Result())
	wantCode(t, e.run("lock", "ONLY"), stockctl.ExitOK)

	// A lock hash without a PEXPIRE (written by hand, or a broken client) never frees itself.
	must(e.rdb.HSet(context.Background(), "lock:{STUCK}", "someone", 1).Result())
	var got lockJSON
	wantCode(t, e.runJSON(&got, "lock", "STUCK"), stockctl.ExitOK)
	if n := got.Nodes[0]; len(n.Holders) != 1 || n.LeaseMS != -1 {
		t.Fatalf("stuck lock: %+v, want one holder and lease_remaining_ms -1", n)
	}
	wantContains(t, "stuck lock output", e.run("lock", "STUCK").stdout, "held by someone (holds 1), no lease: it never expires")
}

func TestLockWithRedlockShowsEveryMaster(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // REDIS_URL: the stock
	masters := redistest.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(masters))
	urls := make([]string, len(masters))
	for i, m := range masters {
		clients[i], urls[i] = m.Client(), m.URL()
	}
	locker := must(rlock.NewRedlock(clients, rlock.Config{}))
	t.Cleanup(func() { _ = locker.Close() })
	ctx := context.Background()
	wantCode(t, e.run("stock", "set", "SKU-1", "10"), stockctl.ExitOK)
	lease := must(locker.Acquire(rlock.WithOwner(ctx, "owner-r"), "SKU-1"))
	if _, err := inventory.New(e.rdb).Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, lease.Token()); err != nil {
		t.Fatal(err)
	}
	redlock := "--redlock-urls=" + strings.Join(urls, ",")

	var got lockJSON
	wantCode(t, e.runJSON(&got, "lock", "SKU-1", redlock), stockctl.ExitOK)
	if !got.Redlock || len(got.Nodes) != 3 || got.Fence != lease.Token() || len(got.Warnings) != 0 {
		t.Fatalf("redlock %v, %d nodes, fence %d, warnings %q; want 3 masters, fence %d, no warning",
			got.Redlock, len(got.Nodes), got.Fence, got.Warnings, lease.Token())
	}
	for i, n := range got.Nodes {
		if n.Addr != masters[i].Addr || len(n.Holders) != 1 || n.Holders[0].Owner != "owner-r" || n.Counter == nil {
			t.Fatalf("master %d: %+v, want %s held by owner-r with a counter", i, n, masters[i].Addr)
		}
	}

	// One master without its counter: a majority still reaches the fence.
	must(clients[0].Del(ctx, got.CounterKey).Result())
	wantCode(t, e.runJSON(&got, "lock", "SKU-1", redlock), stockctl.ExitOK)
	if got.Nodes[0].Counter != nil || len(got.Warnings) != 0 {
		t.Fatalf("one counter lost: node 0 counter %v, warnings %q; want nil and none", got.Nodes[0].Counter, got.Warnings)
	}
	// Two of three, with the fence at 3: a holder whose majority is those two gets token 1, below it.
	must(clients[1].Del(ctx, got.CounterKey).Result())
	must(e.rdb.HSet(ctx, "stock:{SKU-1}", "fence", 3).Result())
	wantCode(t, e.runJSON(&got, "lock", "SKU-1", redlock), stockctl.ExitOK)
	if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], staleWarning) {
		t.Fatalf("two counters lost: warnings %q, want the stale warning", got.Warnings)
	}
}
