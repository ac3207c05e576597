package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A hand-back that takes a failed attempt off the delivery count (reclaim.lua, uncount) takes one off when
// its reply is lost and go-redis sends it again: MAX_ATTEMPTS counts every delivery but the uncounted ones.
// (Issue 30, suspicion 5, confirmed: the resend found the count lowered and lowered it again, so every lost
// reply of a hand-back bought the entry one more attempt. The caller now passes the count it saw.)
func TestAResentReclaimUncountsOneDelivery(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "x"}}).Val()
	rdb.XGroupCreate(ctx, "orders", "g", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"orders", ">"}, Count: 1})
	rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "orders", Group: "g", Consumer: "c1", Messages: []string{id}}) // delivery 2
	// Loaded first: the reply lost is that of a run, not a NOSCRIPT.
	if err := reclaimScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}

	proxy := redistest.NewReplyDropper(t, srv.Addr)
	resending := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // go-redis's default: 3 retries
	t.Cleanup(func() { _ = resending.Close() })
	proxy.DropReplyTo(reclaimScript.Hash(), 1)
	if err := testConsumer(resending).reclaim(ctx, testParts[0], id, 20*time.Second, 2); err != nil || proxy.Dropped() != 1 {
		t.Fatalf("reclaim: %v, %d replies lost; want nil after 1", err, proxy.Dropped())
	}
	p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: id, End: id, Count: 1}).Val()
	if len(p) != 1 || p[0].Consumer != "c1" || p[0].RetryCount != 1 || p[0].Idle < 20*time.Second {
		t.Fatalf("pending %+v, want c1's entry with 1 delivery (2, one uncounted) and 20 s idle", p)
	}
}

// At shutdown a consumer hands back what it still owns: the entries it was working on or had read ahead
// uncounted, but an entry it had already handed back after a counted failure keeps its count (a restart
// must not erase a counted attempt, or an order that always fails would never reach MAX_ATTEMPTS).
func TestHandBackPendingKeepsTheCountOfAFailedAttempt(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	fresh := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "x"}}).Val()
	failed := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "y"}}).Val()
	rdb.XGroupCreate(ctx, "orders", "g", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"orders", ">"}, Count: 2})
	c := testConsumer(rdb)
	// failed's attempt failed permanently: handed back counted, to be claimed after about a second.
	if err := c.reclaim(ctx, testParts[0], failed, c.claimIdle-time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := c.HandBackPending(ctx); err != nil || n != 2 {
		t.Fatalf("handed back %d, %v; want 2", n, err)
	}
	counts := map[string]int64{}
	for _, p := range rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: "-", End: "+", Count: 10}).Val() {
		counts[p.ID] = p.RetryCount
	}
	if counts[fresh] != 0 || counts[failed] != 1 {
		t.Fatalf("delivery counts %v; want %s uncounted (0) and %s's failed attempt still counted (1)", counts, fresh, failed)
	}
}

// A consumer hands back every entry it has pending at shutdown, however many: here 250, read 100 at a time.
func TestHandBackPendingHandsBackEveryEntry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	for range 250 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "x"}})
	}
	rdb.XGroupCreate(ctx, "orders", "g", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"orders", ">"}, Count: 250})
	c := testConsumer(rdb)
	if n, err := c.HandBackPending(ctx); err != nil || n != 250 {
		t.Fatalf("handed back %d, %v; want 250", n, err)
	}
	for _, p := range rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: "-", End: "+", Count: 300}).Val() {
		if p.Idle < c.claimIdle-time.Second {
			t.Fatalf("entry %s idle %v: not handed back (want about %v, claimable at once)", p.ID, p.Idle, c.claimIdle)
		}
	}
}
