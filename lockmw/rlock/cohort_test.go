package rlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// queuedFor returns how many acquisitions of key wait in l's process.
func queuedFor(l *Reentrant, key string) int {
	l.e.queue.mu.Lock()
	defer l.e.queue.mu.Unlock()
	if kq := l.e.queue.keys[namesFor(key).channel]; kq != nil {
		return len(kq.waiters)
	}
	return 0
}

// waitQueued waits until n acquisitions of key wait in l's process.
func waitQueued(t *testing.T, l *Reentrant, key string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); queuedFor(l, key) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d of %d acquisitions queued", queuedFor(l, key), n)
		}
	}
}

// commandCalls returns the calls of each Redis command so far (INFO commandstats), scripts' inner calls
// included.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	calls := map[string]int{}
	for _, line := range strings.Split(rdb.Info(context.Background(), "commandstats").Val(), "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls[name], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	}
	return calls
}

// queueBehind starts n acquisitions of key on l, each by its own owner, once holder holds it; each sends
// its lease when it gets the lock and releases it when told to by the returned function. Those still
// waiting when the test ends give up.
func queueBehind(t *testing.T, l *Reentrant, key string, n int) (<-chan Lease, func(Lease)) {
	got := make(chan Lease, n)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		wg.Go(func() {
			lease, err := l.Acquire(WithOwner(ctx, "waiter-"+strconv.Itoa(i)), key)
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			got <- lease
		})
	}
	waitQueued(t, l, key, n)
	return got, func(lease Lease) {
		if err := lease.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// next returns the next lease of queueBehind.
func next(t *testing.T, got <-chan Lease) Lease {
	t.Helper()
	select {
	case l := <-got:
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("no waiter got the lock within 5 s")
	}
	return nil
}

// handedOn returns the lease of the waiter a release of key "k" handed the lock to, or nil when the loss of
// the process's hold was noticed as it was handed on: the hold left the process, and no waiter here gets the
// lock until the process holding it in Redis releases it.
func handedOn(t *testing.T, e *engine, got <-chan Lease) Lease {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		select {
		case l := <-got:
			return l
		case <-time.After(time.Millisecond):
		}
		if _, _, _, held := e.dog.holder("k"); !held {
			return nil
		}
	}
	t.Fatal("no waiter got the lock within 5 s, and the process still holds it")
	return nil
}

// N acquisitions queued behind a holder in one process get the lock one after the other without a Redis
// call: the whole cohort costs one acquire script and one release script, and one unlock message.
func TestHandOffsCostOneAcquireAndOneRelease(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{HandOff: HandOff{Max: 100, Hold: time.Minute}})
	const waiters = 16
	before := commandCalls(t, rdb)
	holder := mustAcquire(t, l, context.Background(), "k")
	got, release := queueBehind(t, l, "k", waiters)
	release(holder)
	for i := range waiters {
		lease := next(t, got)
		if st := StatsOf(lease); !st.HandOff || st.Attempts != 0 || lease.Token() != holder.Token() {
			t.Fatalf("holder %d: %+v token %d; want a hand-off without attempts, with the cohort's token %d",
				i, st, lease.Token(), holder.Token())
		}
		release(lease)
	}
	after := commandCalls(t, rdb)
	evalsha, publish := after["evalsha"]-before["evalsha"], after["publish"]-before["publish"]
	t.Logf("%d holders: %d EVALSHA, %d PUBLISH", waiters+1, evalsha, publish)
	if evalsha != 2 || publish != 1 {
		t.Fatalf("%d holders ran %d scripts and sent %d unlock messages; want 2 (acquire, release) and 1",
			waiters+1, evalsha, publish)
	}
	if n, _ := rdb.Exists(context.Background(), "lock:{k}").Result(); n != 0 {
		t.Fatal("the lock is still held after the cohort's last release")
	}
}

// HandOff.Max bounds a cohort: after Max hand-offs the lock is freed in Redis and taken again, with a new
// token; HandOff.Max < 0 turns hand-offs off.
func TestHandOffBound(t *testing.T) {
	for _, bound := range []int{-1, 3} {
		t.Run("Max="+strconv.Itoa(bound), func(t *testing.T) {
			s := redistest.Start(t)
			l := newLocker(t, s, Config{HandOff: HandOff{Max: bound, Hold: time.Minute}})
			holder := mustAcquire(t, l, context.Background(), "k")
			const waiters = 10
			got, release := queueBehind(t, l, "k", waiters)
			tokens := []int64{holder.Token()}
			release(holder)
			for range waiters {
				lease := next(t, got)
				tokens = append(tokens, lease.Token())
				release(lease)
			}
			run, longest := 1, 1
			for i := 1; i < len(tokens); i++ {
				if tokens[i] == tokens[i-1] {
					run++
				} else {
					run = 1
				}
				longest = max(longest, run)
			}
			if want := max(bound+1, 1); longest != want {
				t.Fatalf("tokens %v: at most %d holders in a row shared a token, want %d", tokens, longest, want)
			}
		})
	}
}

// fencedWrite is a store's fenced write, as inventory.WithFenceCounter does it: refused when the token is
// below the lock's fencing counter, that is when a newer holder took the lock.
const fencedWrite = `if tonumber(ARGV[1]) < tonumber(redis.call('get', KEYS[1]) or '0') then return 0 end
redis.call('incr', KEYS[2]) return 1`

// A lost lease ends the cohort: the lock of k is deleted in Redis and taken by another process while a
// cohort holds it here. Until the watchdog notices, the cohort may hand the lock on, but every write its
// holders make with the cohort's token is refused by the fence; once noticed, the current holder's
// context is cancelled with ErrLockLost and nobody here gets the lock until the other process releases it.
func TestLostLeaseEndsTheCohort(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	const lease = 900 * time.Millisecond // renewed every 300 ms
	cfg := Config{Lease: lease, HandOff: HandOff{Max: 1000, Hold: time.Minute}}
	a, b := newLocker(t, s, cfg), newLocker(t, s, cfg)
	ctx := context.Background()
	write := func(token int64) bool {
		ok, err := rdb.Eval(ctx, fencedWrite, []string{TokenKey("k"), "writes"}, token).Int()
		if err != nil {
			t.Fatal(err)
		}
		return ok == 1
	}

	holder := mustAcquire(t, a, ctx, "k")
	got, release := queueBehind(t, a, "k", 16) // 16 turns of 40 ms: more than the loss takes to notice
	rdb.Del(ctx, "lock:{k}")                   // expired while this process stalled
	other := mustAcquire(t, b, ctx, "k")
	lostBy := time.Now().Add(lease/3 + 200*time.Millisecond)

	stale := 0
	current := holder
	for current != nil {
		if write(current.Token()) {
			t.Fatalf("a write with the cohort's token %d was accepted while another process holds the lock (token %d)",
				current.Token(), other.Token())
		}
		stale++
		select {
		case <-current.Context().Done(): // the loss was noticed
			if cause := context.Cause(current.Context()); !errors.Is(cause, ErrLockLost) {
				t.Fatalf("holder's context ended with %v, want ErrLockLost", cause)
			}
			_ = current.Release(ctx) // ErrNotHeld
			current = nil
		case <-time.After(40 * time.Millisecond):
			if time.Now().After(lostBy) {
				t.Fatal("the lost lease was not noticed within lease/3")
			}
			_ = current.Release(ctx) // hands the lock on, unless the loss is noticed just now
			current = handedOn(t, a.e, got)
		}
	}
	t.Logf("%d writes of the cohort refused before the loss was noticed", stale)
	select {
	case l := <-got:
		t.Fatalf("a waiter got the lock (token %d, hand-off %v) while another process holds it", l.Token(), StatsOf(l).HandOff)
	case <-time.After(500 * time.Millisecond):
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	after := next(t, got)
	if after.Token() <= other.Token() || !write(after.Token()) {
		t.Fatalf("after the other process released: token %d (other's %d), want a newer token that writes", after.Token(), other.Token())
	}
	release(after)
}

// A Redisson client waiting for a key that a cohort here passes around is woken by the unlock message
// when the cohort reaches its bound, and gets the lock long before any lease could run out.
func TestRedissonWaiterGetsTheLockWhenACohortEnds(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{HandOff: HandOff{Max: 8, Hold: 20 * time.Millisecond}})
	n := namesFor("k")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := range 8 { // the cohort: each takes the lock again as soon as it released it
		wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := l.Acquire(WithOwner(ctx, "busy-"+strconv.Itoa(i)), "k")
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond)
				_ = lease.Release(context.Background())
			}
		})
	}
	waitQueued(t, l, "k", 4)

	// Redisson's RedissonLock.lock(): subscribe to the unlock channel, then try; on a pttl wait for an
	// unlock message (or the pttl) and try again.
	const javaOwner = "8743c9c0-0795-4907-87fd-6c719a6b4586:1"
	sub := rdb.Subscribe(ctx, n.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	start, woken := time.Now(), 0
	for {
		pttl, err := rdb.Eval(ctx, redissonLock, []string{n.lock}, 30000, javaOwner).Int64()
		if errors.Is(err, redis.Nil) && woken == 0 && time.Since(start) < time.Second {
			// Taken at once, free between two holders: give it back (Redisson's unlock, whose own message
			// this subscription reads first) and ask again, as a waiter.
			rdb.Del(ctx, n.lock)
			rdb.Publish(ctx, n.channel, "0")
			if _, err := sub.ReceiveMessage(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Duration(pttl)*time.Millisecond)
		_, err = sub.ReceiveMessage(wctx)
		cancel()
		if err != nil {
			t.Fatalf("no unlock message within the holder's pttl %d ms: %v", pttl, err)
		}
		woken++
	}
	took := time.Since(start)
	t.Logf("Redisson client got the lock after %v, woken %d times", took, woken)
	if took > time.Second || woken == 0 {
		t.Fatalf("Redisson client got the lock after %v, woken by %d unlock messages; want within 1 s, by a message", took, woken)
	}
	rdb.Del(context.Background(), n.lock) // Redisson's unlock, in short; the cohort may go on
	rdb.Publish(context.Background(), n.channel, "0")
}

// ReleaseIn sends the release with the caller's commands in one pipeline; a release the pipeline did not
// deliver (the server lost its scripts) is sent again by finish; a waiter here gets the lock handed over
// without any Redis call.
func TestReleaseInAPipeline(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l, other := newLocker(t, s, Config{}), newLocker(t, s, Config{})
	ctx := context.Background()
	for _, flush := range []bool{false, true} {
		lease := mustAcquire(t, l, ctx, "k")
		got := acquireLater(t, other, ctx, "k")
		time.Sleep(100 * time.Millisecond) // the other process waits for the unlock message
		if flush {
			rdb.ScriptFlush(ctx)
		}
		pipe := rdb.Pipeline()
		get := pipe.Get(ctx, "k-value")
		finish := ReleaseIn(ctx, pipe, lease)
		if lease.Context().Err() != nil {
			t.Fatal("the lease ended before its release was sent")
		}
		_, err := pipe.Exec(ctx)
		if err := finish(err); err != nil {
			t.Fatalf("flush %v: %v", flush, err)
		}
		if !errors.Is(get.Err(), redis.Nil) || lease.Context().Err() == nil {
			t.Fatalf("flush %v: the caller's command %v, lease context %v", flush, get.Err(), lease.Context().Err())
		}
		select {
		case <-got:
		case <-time.After(2 * time.Second):
			t.Fatalf("flush %v: the other process was not woken by the release", flush)
		}
	}

	holder := mustAcquire(t, l, ctx, "k")
	waiters, release := queueBehind(t, l, "k", 1)
	pipe := rdb.Pipeline()
	finish := ReleaseIn(ctx, pipe, holder)
	if n := pipe.Len(); n != 0 {
		t.Fatalf("%d commands queued for a release that hands the lock over, want none", n)
	}
	if err := finish(nil); err != nil {
		t.Fatal(err)
	}
	if next := next(t, waiters); !StatsOf(next).HandOff {
		t.Fatal("the waiter here did not get the lock handed over")
	} else {
		release(next)
	}
}

// Three lockers of 16 goroutines each take one key back to back: every acquisition must come within
// seconds. A waiter once took a hold just handed to it for a reentry, counting a hold in Redis that no
// release took back: the lock stayed in Redis with nobody holding it here, and every waiter waited for
// its lease (30 s) to run out.
func TestBackToBackHandOffsNeverOrphanTheLock(t *testing.T) {
	s := redistest.Start(t)
	for round := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var lockers []*Reentrant
		for range 3 {
			lockers = append(lockers, newLocker(t, s, Config{}))
		}
		var left atomic.Int64
		left.Store(1000)
		var wg sync.WaitGroup
		for _, l := range lockers {
			for range 16 {
				wg.Go(func() {
					for left.Add(-1) >= 0 && ctx.Err() == nil {
						lease, err := l.Acquire(ctx, "hot")
						if err != nil {
							t.Errorf("round %d: %v", round, err)
							return
						}
						_ = lease.Release(context.Background())
					}
				})
			}
		}
		wg.Wait()
		cancel()
		if st, err := lockers[0].Inspect(context.Background(), "hot"); err != nil || st.Owner != "" {
			t.Fatalf("round %d: the lock is held by %q (%d holds) after every holder released it (%v)", round, st.Owner, st.Holds, err)
		}
		if t.Failed() {
			return
		}
	}
}

// A process that frees a lock another process waits for, having held it for its hand-off bound, gives that
// one a head start: its own next acquisition, even one that arrives after the release with nobody queued
// here, waits yieldFor first. (A worker's next batch leader is such an acquisition.) Without it the releasing process, whose attempt needs
// no wake-up, takes the lock again almost every time.
func TestReleasingProcessYieldsToAWaitingOne(t *testing.T) {
	s := redistest.Start(t)
	cfg := Config{HandOff: HandOff{Hold: 10 * time.Millisecond}} // each hold below reaches the bound
	a, b := newLocker(t, s, cfg), newLocker(t, s, cfg)
	ctx := context.Background()
	otherFirst := 0
	const rounds = 20
	for range rounds {
		held := mustAcquire(t, a, ctx, "k")
		got := acquireLater(t, b, ctx, "k") // takes it, notes when, releases it
		waitQueued(t, b, "k", 1)
		time.Sleep(20 * time.Millisecond) // b is subscribed and waits for the unlock message
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		again := mustAcquire(t, a, ctx, "k") // at once: nothing of a is queued
		at := time.Now()
		_ = again.Release(ctx)
		if bAt := <-got; bAt.Before(at) {
			otherFirst++
		}
	}
	t.Logf("the waiting process took the lock first in %d of %d rounds", otherFirst, rounds)
	if otherFirst < rounds*3/4 {
		t.Fatalf("the waiting process took the lock first in %d of %d rounds, want at least %d", otherFirst, rounds, rounds*3/4)
	}
}
