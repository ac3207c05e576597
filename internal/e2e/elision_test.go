package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Lock elision: a batch's stock script takes the free lock itself, so uncontended orders cost no lock
// script and send no unlock message; with LOCK_ELISION=false each order acquires and releases the lock
// (two scripts more, a PUBLISH). Counted with INFO commandstats over 100 orders of 100 SKUs.
func TestLockElisionSkipsTheLockScripts(t *testing.T) {
	calls := map[string]map[string]int{}
	for _, elision := range []string{"true", "false"} {
		s := redistest.Start(t)
		rdb := s.Client()
		ctx := context.Background()
		for i := range 100 {
			rdb.HSet(ctx, fmt.Sprintf("stock:{E%d}", i), "available", 5)
		}
		startWorker(t, s, "w"+elision, "LOCK_ELISION="+elision, "WORKER_CONCURRENCY=4")
		waitFor(t, 10*time.Second, "the worker reads the stream", func() bool {
			return rdb.Exists(ctx, "orders").Val() == 1
		})
		before := commandCalls(t, s)
		for i := range 100 {
			xaddOrder(t, rdb, fmt.Sprintf("o-%d", i), fmt.Sprintf("E%d", i), 1)
		}
		waitFor(t, 20*time.Second, "every order is decided", func() bool {
			return len(rdb.Keys(ctx, "order:*").Val()) == 100
		})
		after := commandCalls(t, s)
		calls[elision] = map[string]int{}
		for _, cmd := range []string{"evalsha", "publish", "hset", "xreadgroup", "xautoclaim", "zadd", "xpending"} {
			calls[elision][cmd] = after[cmd] - before[cmd]
		}
		// The scripts that are not the lock's nor the stock's: reads and claims (fetch.lua: one XREADGROUP
		// or XAUTOCLAIM each), the outcome events of a round (answer.lua: one XPENDING each), and the worker
		// saying it is live (live.lua: one ZADD), as many as the run's length and timing make them.
		calls[elision]["evalsha"] -= calls[elision]["xreadgroup"] + calls[elision]["xautoclaim"] + calls[elision]["zadd"] +
			calls[elision]["xpending"]
	}
	t.Logf("commands for 100 orders: elision %v, no elision %v", calls["true"], calls["false"])
	// HSET: the stock's fence once per order, and without elision the lock's hash once more.
	if calls["true"]["publish"] != 0 || calls["true"]["hset"] != 100 {
		t.Errorf("with elision: %d PUBLISH, %d HSET: want none, and one per order (the fence: no lock written)", calls["true"]["publish"], calls["true"]["hset"])
	}
	if calls["false"]["publish"] < 100 || calls["false"]["hset"] < 200 {
		t.Errorf("without elision: %d PUBLISH, %d HSET: want one lock acquisition and unlock message per order", calls["false"]["publish"], calls["false"]["hset"])
	}
	if saved := calls["false"]["evalsha"] - calls["true"]["evalsha"]; saved < 190 {
		t.Errorf("elision saved %d script calls on 100 orders, want about 200 (an acquire and a release each)", saved)
	}
}

// A lock held by another client (Redisson's layout: a hash of owner -> holds) is not elided: the order
// waits for it, is decided once the holder unlocks (the unlock message on Redisson's channel wakes the
// worker), under a token above the holder's.
func TestElisionWaitsForAForeignHolder(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{P}", "available", 10)
	rdb.HSet(ctx, "lock:{P}", "redisson-client:1", 1)
	rdb.PExpire(ctx, "lock:{P}", 30*time.Second)
	rdb.Set(ctx, "redisson_lock_token:lock:{P}", 41, 0) // the holder's token
	startWorker(t, s, "w0")
	xaddOrder(t, rdb, "o-1", "P", 1)
	time.Sleep(time.Second)
	if rdb.Exists(ctx, "order:{P}:o-1").Val() != 0 {
		t.Fatal("the order was decided while another client held the SKU's lock")
	}
	rdb.Del(ctx, "lock:{P}")
	rdb.Publish(ctx, "redisson_lock__channel:lock:{P}", 0)
	waitFor(t, 5*time.Second, "the order is decided once the holder unlocked", decided(rdb, "P", "o-1"))
	if rec := rdb.Get(ctx, "order:{P}:o-1").Val(); !strings.Contains(rec, `"fence":42`) {
		t.Fatalf("record %s, want the next token, 42", rec)
	}
}

// commandCalls returns the calls of each Redis command of s so far (INFO commandstats).
func commandCalls(t *testing.T, s *redistest.Server) map[string]int {
	t.Helper()
	calls := map[string]int{}
	for _, line := range strings.Split(s.Client().Info(context.Background(), "commandstats").Val(), "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if ok {
			calls[name], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	return calls
}

// A basket elides its locks too, on one Redis: with both SKUs' locks free its script takes them (no lock
// script, no unlock message); with one held by another client it waits for it, and is decided once the
// holder unlocks, under a token above the holder's.
func TestABasketElidesItsLocksAndWaitsForAForeignHolder(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{A}", "available", 10)
	rdb.HSet(ctx, "stock:{B}", "available", 10)
	startWorker(t, s, "w0")
	waitFor(t, 10*time.Second, "the worker reads the stream", func() bool {
		return rdb.Exists(ctx, "orders").Val() == 1
	})
	before := commandCalls(t, s)
	xaddPayload(t, rdb, `{"order_id":"o-1","lines":[{"sku":"A","quantity":1},{"sku":"B","quantity":2}]}`)
	waitFor(t, 5*time.Second, "the basket is decided", decided(rdb, "B", "o-1"))
	after := commandCalls(t, s)
	// HINCRBY: the stocks' available and reserved of each line; an acquisition and a release would add one
	// each on the lock's hash per line, and the release an unlock message.
	if incrs, published := after["hincrby"]-before["hincrby"], after["publish"]-before["publish"]; incrs != 4 || published != 0 {
		t.Errorf("a basket with its locks free: %d HINCRBY, %d PUBLISH; want 4 (the stock's) and no unlock message", incrs, published)
	}

	rdb.HSet(ctx, "lock:{B}", "redisson-client:1", 1)
	rdb.PExpire(ctx, "lock:{B}", 30*time.Second)
	rdb.Set(ctx, "redisson_lock_token:lock:{B}", 41, 0) // the holder's token
	xaddPayload(t, rdb, `{"order_id":"o-2","lines":[{"sku":"A","quantity":1},{"sku":"B","quantity":1}]}`)
	time.Sleep(time.Second)
	if rdb.Exists(ctx, "order:{A}:o-2", "order:{B}:o-2").Val() != 0 {
		t.Fatal("the basket was decided while another client held one of its SKUs' locks")
	}
	rdb.Del(ctx, "lock:{B}")
	rdb.Publish(ctx, "redisson_lock__channel:lock:{B}", 0)
	waitFor(t, 5*time.Second, "the basket is decided once the holder unlocked", decided(rdb, "B", "o-2"))
	// A token past the holder's 41: 42, or 43 when an acquisition that drew 42 as the holder unlocked gave
	// up at its deadline and the retry went past it (the two race on a slow machine).
	rec := rdb.Get(ctx, "order:{B}:o-2").Val()
	if m := regexp.MustCompile(`"fence":(\d+)`).FindStringSubmatch(rec); m == nil || (m[1] != "42" && m[1] != "43") {
		t.Fatalf("record %s, want a token past the holder's 41 (42, or 43 after an acquisition that gave up)", rec)
	}
	if st := rdb.HGetAll(ctx, "stock:{B}").Val(); st["available"] != "7" || st["reserved"] != "3" {
		t.Fatalf("stock of B %v, want 7 available and 3 reserved", st)
	}
}
