package lockmw

// Regression tests for the findings of a review of this package: each failed before its fix.

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redistest"
)

// delayProxy forwards TCP to target; client->server bytes are delayed by delay, server->client bytes by
// replyDelay (when set).
type delayProxy struct {
	ln         net.Listener
	delay      atomic.Int64
	replyDelay atomic.Int64
}

// a nested (reentrant) Redlock acquire whose ctx is already cancelled runs undo() on every master,
// decrementing the OUTER hold (the reentry's scripts never ran). The lock is deleted on all masters and
// another locker takes it while the outer lease's context is still live.
func TestRegressionRedlockCancelledReentryDeletesOuterHold(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newRedlock(t, servers, Config{Lease: 6 * time.Second})
	b := newRedlock(t, servers, Config{Lease: 6 * time.Second})
	octx := WithOwner(context.Background(), "owner-A")
	outer := mustAcquire(t, a, octx, "k")
	defer outer.Release(context.Background())

	cctx, cancel := context.WithCancel(octx)
	cancel()
	if _, err := a.Acquire(cctx, "k"); err == nil {
		t.Fatal("acquire with cancelled ctx succeeded")
	}
	time.Sleep(50 * time.Millisecond)
	for i, s := range servers {
		n, _ := s.Client().Exists(context.Background(), "lock:{k}").Result()
		t.Logf("node %d: lock exists=%d", i, n)
	}
	other, err := b.TryAcquire(context.Background(), "k")
	if err == nil {
		t.Errorf("SAFETY: second owner got the lock (token %d) while outer lease ctx err=%v (token %d)",
			other.Token(), outer.Context().Err(), outer.Token())
		_ = other.Release(context.Background())
	}
}

// Redlock waiter spins while the holder holds only a majority: every failed attempt grabs the free
// masters, undo() deletes them there and PUBLISHes "0", which wakes this same waiter (and every other
// process's head) at once.
func TestRegressionRedlockSelfWakeSpin(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	c3 := servers[2].Client()
	// A foreign owner holds node 3 while A acquires, so A gets nodes 1 and 2 only (quorum 2 of 3).
	c3.HSet(ctx, "lock:{k}", "foreign", 1)
	c3.PExpire(ctx, "lock:{k}", 10*time.Second)
	a := newRedlock(t, servers, Config{Lease: 6 * time.Second})
	la := mustAcquire(t, a, ctx, "k")
	defer la.Release(ctx)
	c3.Del(ctx, "lock:{k}") // node 3 is free now (silently)

	b := newRedlock(t, servers, Config{Lease: 6 * time.Second, MaxWait: time.Second})
	before := evalshaCalls(t, c3)
	_, err := b.Acquire(ctx, "k")
	after := evalshaCalls(t, c3)
	t.Logf("acquire err=%v; EVALSHA calls on node 3 during 1 s wait: %d", err != nil, after-before)
	// Each failed attempt takes the free master and gives it back, publishing an unlock that wakes the
	// waiter itself: it then retries after a random 20-100 ms (Redlock's random retry delay), not at once.
	if after-before > 100 {
		t.Errorf("waiter spun: %d script calls on one node in 1 s while the lock was held", after-before)
	}
}

func newDelayProxy(t *testing.T, target string) *delayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						if d := p.replyDelay.Load(); d > 0 {
							time.Sleep(time.Duration(d))
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if d := p.delay.Load(); d > 0 {
							time.Sleep(time.Duration(d))
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						s.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

// lost wake-up. The first waiter (which owns the subscribe-and-wait-until-confirmed step) gives up
// before the SUBSCRIBE is confirmed; the next waiter is promoted with tryNow and attempts at once,
// without waiting for the confirmation. An unlock published before the confirmation is lost, and the
// first confirmation does not notify, so the waiter sleeps until the holder's PTTL.
func TestRegressionLostWakeupWhenFirstWaiterLeavesBeforeConfirm(t *testing.T) {
	s := redistest.Start(t)
	const lease = 3 * time.Second
	holder := newLocker(t, s, Config{Lease: lease})
	w := newLocker(t, s, Config{Lease: lease})
	p := newDelayProxy(t, s.Addr)
	psClient := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { psClient.Close() })
	_ = w.notifiers[0].close()
	w.notifiers = []*notifier{newNotifier(psClient, w.queue.notify)}
	time.Sleep(300 * time.Millisecond) // pub/sub connection established
	p.delay.Store(int64(400 * time.Millisecond))

	ctx := context.Background()
	hl := mustAcquire(t, holder, ctx, "k")

	aCtx, aCancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer aCancel()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = w.Acquire(aCtx, "k") }) // first waiter: gives up at 50 ms
	time.Sleep(10 * time.Millisecond)
	var got Lease
	var err error
	start := time.Now()
	wg.Go(func() { got, err = w.Acquire(ctx, "k") })
	time.Sleep(140 * time.Millisecond)
	released := time.Now()
	if rerr := hl.Release(ctx); rerr != nil {
		t.Fatal(rerr)
	}
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release(ctx)
	t.Logf("second waiter got the lock %v after the release (waited %v)", time.Since(released), time.Since(start))
	if time.Since(released) > time.Second {
		t.Errorf("lost wake-up: waiter slept %v after the lock was freed", time.Since(released))
	}
}

// a reentrant acquire by an owner whose hold is gone in Redis (but not yet noticed by the watchdog)
// is a FRESH acquisition in Redis (count 1, new token), yet dog.add folds it into the stale hold
// (count 2, old token). The outer Release then deletes the lock the inner lease still believes it
// holds; another owner gets it while the inner lease's context is live.
func TestRegressionReentryIntoLostHold(t *testing.T) {
	s := redistest.Start(t)
	const lease = 6 * time.Second // watchdog period 2 s
	a := newLocker(t, s, Config{Lease: lease})
	b := newLocker(t, s, Config{Lease: lease})
	ctx := WithOwner(context.Background(), "owner-A")
	outer := mustAcquire(t, a, ctx, "k")
	s.Client().Del(context.Background(), "lock:{k}") // expired / force-released behind our back
	inner := mustAcquire(t, a, ctx, "k")             // fresh in Redis
	tokenNow, _ := s.Client().Get(context.Background(), "redisson_lock_token:lock:{k}").Int64()
	t.Logf("outer token %d, inner token %d, counter %d, reentry=%v", outer.Token(), inner.Token(), tokenNow, StatsOf(inner).Reentry)
	if err := outer.Release(context.Background()); err != nil {
		t.Logf("outer release: %v", err)
	}
	other, err := b.TryAcquire(context.Background(), "k")
	if err == nil {
		t.Errorf("SAFETY: other owner holds (token %d) while inner lease ctx err=%v", other.Token(), inner.Context().Err())
		_ = other.Release(context.Background())
	}
	_ = inner.Release(context.Background())
}

// a lease that was LOST still releases by owner id: if the same owner re-acquired meanwhile,
// the stale lease's Release deletes the new lock and reports success.
func TestRegressionReleaseOfLostLeaseFreesNewHold(t *testing.T) {
	s := redistest.Start(t)
	a := newLocker(t, s, Config{Lease: 300 * time.Millisecond})
	b := newLocker(t, s, Config{Lease: 300 * time.Millisecond})
	ctx := WithOwner(context.Background(), "owner-A")
	l1 := mustAcquire(t, a, ctx, "k")
	s.Client().Del(context.Background(), "lock:{k}")
	<-l1.Context().Done()
	if !errors.Is(context.Cause(l1.Context()), ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(l1.Context()))
	}
	l2 := mustAcquire(t, a, ctx, "k")
	err := l1.Release(context.Background())
	t.Logf("release of lost lease: %v", err)
	other, oerr := b.TryAcquire(context.Background(), "k")
	if oerr == nil {
		t.Errorf("SAFETY: lost lease's Release (err=%v) freed l2; other owner holds while l2 ctx err=%v", err, l2.Context().Err())
		_ = other.Release(context.Background())
	}
	_ = l2.Release(context.Background())
}

// abandon() of a cancelled attempt releases by owner id in the background; if the same owner
// acquires again before it lands, the abandon deletes the new lock.
func TestRegressionAbandonDeletesSameOwnersNewLock(t *testing.T) {
	s := redistest.Start(t)
	a := newLocker(t, s, Config{Lease: 5 * time.Second})
	b := newLocker(t, s, Config{Lease: 5 * time.Second})
	rdb := s.Client()
	bad := 0
	for i := range 200 {
		ctx := WithOwner(context.Background(), "owner-A")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _ = a.Acquire(cctx, "k") // fails, spawns abandon()
		l, err := a.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if rdb.Exists(context.Background(), "lock:{k}").Val() == 0 {
			bad++
			if o, err := b.TryAcquire(context.Background(), "k"); err == nil {
				if i < 3 || bad == 1 {
					t.Logf("iteration %d: other owner got the lock while lease ctx err=%v", i, l.Context().Err())
				}
				_ = o.Release(context.Background())
			}
		}
		_ = l.Release(context.Background())
	}
	if bad > 0 {
		t.Errorf("%d of 200 fresh leases had their lock deleted by the previous attempt's abandon()", bad)
	}
}

// two goroutines of one owner wait for a key held elsewhere. When the first gets it, the second is
// promoted with tryNow=false and waits for an unlock message although its own owner now holds the key
// (a reentry "never waits"); if the first waits for the second, they deadlock until ctx ends.
func TestRegressionSameOwnerWaiterWaitsForItself(t *testing.T) {
	s := redistest.Start(t)
	f := newLocker(t, s, Config{Lease: 3 * time.Second})
	a := newLocker(t, s, Config{Lease: 3 * time.Second})
	bg := context.Background()
	fl := mustAcquire(t, f, bg, "k")
	ctx := WithOwner(bg, "owner-A")
	first := make(chan Lease, 1)
	go func() { first <- mustAcquire(t, a, ctx, "k") }()
	time.Sleep(50 * time.Millisecond)
	second := make(chan Lease, 1)
	go func() {
		l, err := a.Acquire(ctx, "k")
		if err == nil {
			second <- l
		}
	}()
	time.Sleep(50 * time.Millisecond)
	_ = fl.Release(bg)
	l1 := <-first
	select {
	case l2 := <-second:
		t.Logf("second re-entered: count %v", StatsOf(l2).Reentry)
		_ = l2.Release(bg)
	case <-time.After(2 * time.Second):
		t.Errorf("owner-A holds the key, yet its second Acquire still waits after 2 s (blocked behind its own hold)")
	}
	_ = l1.Release(bg)
}

// single node, the acquire script ran but its reply was lost to a (non-ctx) timeout: Acquire
// returns an error and nothing releases the lock; the key is blocked for a whole lease.
func TestRegressionLostReplyStrandsLock(t *testing.T) {
	s := redistest.Start(t)
	p := newDelayProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ReadTimeout: 100 * time.Millisecond,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l, err := NewReentrant(c, Config{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	warm, err := l.TryAcquire(ctx, "k") // connection up, scripts cached
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	// The script runs; its reply comes too late for the client. The undo goes over a new connection.
	p.replyDelay.Store(int64(200 * time.Millisecond))
	go func() { time.Sleep(50 * time.Millisecond); p.replyDelay.Store(0) }()
	_, err = l.TryAcquire(ctx, "k")
	t.Logf("TryAcquire: %v", err)
	time.Sleep(500 * time.Millisecond)
	if pttl := s.Client().PTTL(ctx, "lock:{k}").Val(); err != nil && pttl > 0 {
		t.Errorf("acquire failed, yet lock:{k} is held for another %v with no one to release it", pttl)
	}
}

// Close twice panics.
func TestRegressionDoubleClose(t *testing.T) {
	s := redistest.Start(t)
	l, _ := NewReentrant(s.Client(), Config{})
	_ = l.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("second Close panicked: %v", r)
		}
	}()
	_ = l.Close()
}
