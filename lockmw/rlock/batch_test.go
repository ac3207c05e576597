package rlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// stat returns a counter of INFO stats.
func stat(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	for line := range strings.Lines(rdb.Info(context.Background(), "stats").Val()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO stats", name)
	return 0
}

// Concurrent acquisitions and releases share round trips: Redis reads their scripts in fewer reads than
// there are scripts.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	rdb := s.Client()
	ctx := context.Background()
	const goroutines, ops = 32, 100
	readsBefore := stat(t, rdb, "total_reads_processed")
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range ops { // a key of its own: two scripts per section
				lease, err := l.Acquire(ctx, "k"+strconv.Itoa(g))
				if err != nil {
					t.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reads := stat(t, rdb, "total_reads_processed") - readsBefore
	scripts := int64(2 * goroutines * ops)
	t.Logf("%d scripts in %d reads", scripts, reads)
	if reads >= scripts*3/4 {
		t.Errorf("%d scripts took %d reads: concurrent calls did not share round trips", scripts, reads)
	}
}

// A call queued behind round trips that do not come back returns when its context ends, and the batcher
// works again once Redis answers.
func TestQueuedCallKeepsItsContext(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	b := newRunner(rdb).(*batcher)
	script := redis.NewScript(`return redis.call('incr', KEYS[1])`)
	ctx := context.Background()
	if err := script.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	var stuck sync.WaitGroup
	for range maxInFlight { // every round trip on the wire, unanswered
		stuck.Go(func() { b.run(ctx, script, []string{"n"}) })
	}
	waitFor(t, "calls in flight", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inFlight == maxInFlight })
	qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.run(qctx, script, []string{"n"}).Err()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call: %v, want its context's deadline", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("queued call returned after %v, not at its deadline", waited)
	}
	b.mu.Lock()
	queued := len(b.queue)
	b.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d calls left in the queue after the only queued one gave up", queued)
	}
	s.Resume()
	stuck.Wait()
	if n, err := b.run(ctx, script, []string{"n"}).Int(); err != nil || n != maxInFlight+1 {
		t.Fatalf("after Redis answered again: %d, %v; want %d (the abandoned call never sent)", n, err, maxInFlight+1)
	}
}

// waitFor polls cond until it holds, and fails the test when it does not within 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// slowScript keeps Redis busy for ARGV[1] milliseconds, then increments KEYS[1].
var slowScript = redis.NewScript(`
local t = redis.call('time')
local stop = t[1] * 1000000 + t[2] + ARGV[1] * 1000
repeat
  t = redis.call('time')
until t[1] * 1000000 + t[2] >= stop
return redis.call('incr', KEYS[1])`)

// A call whose context ends after a batch took it waits for the batch (here its reply, as another call
// of the batch has no deadline): its caller's next call (an undo, a retry) must not overtake it.
func TestTakenCallWaitsForItsBatch(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	b := newRunner(rdb).(*batcher)
	ctx := context.Background()
	if err := slowScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	// Two calls on the wire keep Redis busy for 100 ms each. The two queued calls go in one batch when the
	// first comes back, at 100 ms at the earliest; the batch's first call keeps Redis busy for 1 s more, so
	// the second call's deadline, at 600 ms, ends while their batch is out, whenever the second call on the
	// wire reaches Redis, and the batch has 500 ms to leave before it.
	qctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	var others sync.WaitGroup
	for range maxInFlight {
		others.Go(func() { b.run(ctx, slowScript, []string{"n"}, 100) })
	}
	waitFor(t, "calls in flight", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inFlight == maxInFlight })
	var mate int
	var mateErr error
	others.Go(func() { mate, mateErr = b.run(ctx, slowScript, []string{"n"}, 1000).Int() })
	waitFor(t, "a queued call", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
	n, err := b.run(qctx, slowScript, []string{"n"}, 0).Int()
	ended := qctx.Err() != nil
	others.Wait()
	if mateErr != nil {
		t.Fatal(mateErr)
	}
	if err != nil || n <= mate {
		t.Fatalf("queued call: %d, %v; want its own reply (after %d, its batch mate's) after its context ended", n, err, mate)
	}
	if !ended {
		t.Fatal("the queued call came back before its context ended: the test did not test anything")
	}
}
