package rlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// dropperClient returns a client of srv through a proxy that drops replies on demand; go-redis resends a
// command whose reply was dropped (MaxRetries, 3 by default).
func dropperClient(t testing.TB, srv *redistest.Server) (*redis.Client, *redistest.ReplyDropper) {
	t.Helper()
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c, proxy
}

// A lost reply to a lock acquisition must not leave a hold nobody owns. The resent acquire script once took
// its reentry branch (count 2) while the process believed it held once: the release left count 1, renewed
// the lease and published nothing, so the key stayed locked for a whole lease (30 s) after its only holder
// released it.
func TestLostAcquireReplyLeavesNoHoldAfterRelease(t *testing.T) {
	srv := redistest.Start(t)
	c, proxy := dropperClient(t, srv)
	l, err := NewReentrant(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	other := newLocker(t, srv, Config{})
	ctx := context.Background()
	warmUp(t, l)

	proxy.DropReplyTo(acquireScript.Hash(), 1)
	lease := mustAcquire(t, l, ctx, "k")
	if proxy.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1: the test tested nothing", proxy.Dropped())
	}
	if holds, _ := srv.Client().HGet(ctx, "lock:{k}", OwnerFrom(lease.Context())).Int(); holds != 1 {
		t.Errorf("%d holds in Redis after one acquisition whose reply was lost, want 1", holds)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client().Exists(ctx, "lock:{k}").Val(); n != 0 {
		t.Errorf("lock:{k} still exists after its only holder released it (pttl %v)", srv.Client().PTTL(ctx, "lock:{k}").Val())
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	next, err := other.Acquire(actx, "k")
	if err != nil {
		t.Fatalf("another owner could not take the released lock within 1 s: %v", err)
	}
	t.Logf("the next owner got the lock %v after the release", time.Since(start))
	_ = next.Release(ctx)
}

// lateLocker is a locker whose clients go through delay proxies, one per server, and honour context
// deadlines, as NewReentrant and NewRedlock ask.
type lateLocker struct {
	name          string
	locker, other Locker
	servers       []*redistest.Server
	proxies       []*delayProxy
}

func newLateLockers(t *testing.T) []lateLocker {
	servers := redistest.StartN(t, 4) // one for the Reentrant, three for the Redlock
	clients := make([]redis.UniversalClient, len(servers))
	proxies := make([]*delayProxy, len(servers))
	for i, s := range servers {
		proxies[i] = newDelayProxy(t, s.Addr)
		c := redis.NewClient(&redis.Options{Addr: proxies[i].ln.Addr().String(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	single, err := NewReentrant(clients[0], Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = single.Close() })
	quorum, err := NewRedlock(clients[1:], Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quorum.Close() })
	return []lateLocker{
		{"reentrant", single, newLocker(t, servers[0], Config{}), servers[:1], proxies[:1]},
		{"redlock", quorum, newRedlock(t, servers[1:], Config{}), servers[1:], proxies[1:]},
	}
}

// A timed-out acquisition is undone over another connection, which can reach Redis before the acquisition
// (still on its way). The undo once released by owner id: it found nothing to release, the acquisition
// then took the lock for an owner that had given up, and the key stayed locked for a whole lease. (A
// timed-out reentry was not undone at all: its count outlived the outer hold.)
func TestUndoThatOvertakesItsAcquisitionLeavesNoHold(t *testing.T) {
	for _, tc := range newLateLockers(t) {
		for _, reentry := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reentry=%v", tc.name, reentry), func(t *testing.T) {
				ctx, key := context.Background(), fmt.Sprintf("k-%v", reentry)
				warmUp(t, tc.locker)
				var outer Lease
				if reentry {
					outer = mustAcquire(t, tc.locker, ctx, key)
					ctx = outer.Context()
				}
				settled(tc.locker)
				tc.acquireOvertaken(t, ctx, key)
				if reentry {
					tc.wantHolds(t, key, OwnerFrom(ctx), 1)
					if err := outer.Release(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				tc.wantHolds(t, key, "", 0)
				next, err := tc.other.TryAcquire(context.Background(), key)
				if err != nil {
					t.Fatalf("another owner could not take the lock: %v", err)
				}
				_ = next.Release(context.Background())
			})
		}
	}
}

// acquireOvertaken makes an acquisition of key under ctx whose script reaches every server 400 ms late,
// after its caller gave up and undid it, and waits until the servers ran it.
func (tc lateLocker) acquireOvertaken(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	var sent []<-chan struct{}
	for _, p := range tc.proxies {
		sent = append(sent, p.holdNext(acquireScript.Hash(), 400*time.Millisecond))
	}
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // Redlock: its node timeout ends sooner
	defer cancel()
	if _, err := tc.locker.TryAcquire(tctx, key); err == nil {
		t.Fatal("the acquisition held back for 400 ms succeeded: the test tested nothing")
	}
	for _, s := range sent {
		<-s
	}
	time.Sleep(50 * time.Millisecond) // Redis ran the late acquisitions
}

// wantHolds checks that on every server owner holds key n times, alone (n 0: nobody holds it).
func (tc lateLocker) wantHolds(t *testing.T, key, owner string, n int) {
	t.Helper()
	r := rig{l: tc.locker, servers: tc.servers}
	r.wantHolds(t, key, owner, n)
}

// A fresh acquisition (its caller holds nothing) that finds its owner id in the lock hash takes that hold as
// its own, and counts it once: the hold is this request's, run before its reply was lost, or one its owner
// no longer knows of (a process that crashed and reuses its owner id), whose count may be above 1. A stale
// count kept would outlive the one release its owner makes: the key would stay locked, with nobody to free it.
func TestFreshAcquisitionCountsOneHoldOverItsOwnersStaleCount(t *testing.T) {
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := WithOwner(context.Background(), "owner-A")
			for _, s := range c.servers { // a Redisson-layout hold of owner-A, 3 deep, that no lease here knows
				if err := s.Client().HSet(ctx, namesFor("k").lock, "owner-A", 3).Err(); err != nil {
					t.Fatal(err)
				}
			}
			lease := mustAcquire(t, c.locker, ctx, "k")
			for i, n := range c.holds(t, "k", "owner-A") {
				if n != 1 {
					t.Errorf("server %d: %d holds of owner-A after its fresh acquisition, want 1", i, n)
				}
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			next, err := c.other.TryAcquire(context.Background(), "k")
			if err != nil {
				t.Fatalf("another owner after the only lease's release: %v, want the lock free (holds left %v)",
					err, c.holds(t, "k", "owner-A"))
			}
			_ = next.Release(context.Background())
		})
	}
}

// lossyLocker returns a locker whose client goes through a reply dropper and never sends a command again
// (MaxRetries -1): a lost reply fails the call, and what follows is rlock's own doing (an undo, a retry).
func lossyLocker(t *testing.T, srv *redistest.Server) (*Reentrant, *redistest.ReplyDropper) {
	t.Helper()
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewReentrant(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	warmUp(t, l)
	return l, proxy
}

// A reentry whose lock had expired in Redis takes it afresh (count 1, a new token). Undone after its reply
// was lost, it must free that lock: the holds it would re-enter are gone, so nothing in Redis is the
// caller's to keep, and a lock left behind stays held, renewed for a hold that was lost.
func TestUndoOfAReentryThatTookTheLockAfreshFreesIt(t *testing.T) {
	srv := redistest.Start(t)
	l, proxy := lossyLocker(t, srv)
	ctx, rdb := context.Background(), srv.Client()
	outer := mustAcquire(t, l, ctx, "k") // a 30 s lease: no renewal notices the loss before the reentry
	rdb.Del(ctx, "lock:{k}")             // expired behind the holder's back

	proxy.DropReplyTo(acquireScript.Hash(), 1)
	if _, err := l.TryAcquire(outer.Context(), "k"); err == nil {
		t.Fatal("a reentry whose reply was lost succeeded")
	}
	if proxy.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1: the test tested nothing", proxy.Dropped())
	}
	if n := rdb.Exists(ctx, "lock:{k}").Val(); n != 0 {
		t.Errorf("lock:{k} %v is held after the undo of the reentry that took it", rdb.HGetAll(ctx, "lock:{k}").Val())
	}
	next, err := newLocker(t, srv, Config{}).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("another owner after the undone reentry: %v, want the lock free", err)
	}
	_ = next.Release(ctx)
	_ = outer.Release(ctx) // ErrNotHeld, its lock lost: it stops being renewed
}

// rlock retries a release whose round trip failed (releaseTries) with the same request id, so the unlock
// latch answers a retry whose first try ran with that try's outcome. Under a new id, the retry after a lost
// reply is a second release: it takes the outer lease's hold away with the inner one's.
func TestReleaseRetryAfterALostReplyTakesAwayOneReentrantHold(t *testing.T) {
	srv := redistest.Start(t)
	l, proxy := lossyLocker(t, srv)
	ctx, rdb := context.Background(), srv.Client()
	outer := mustAcquire(t, l, ctx, "k")
	inner := mustAcquire(t, l, outer.Context(), "k")
	owner := OwnerFrom(outer.Context())

	proxy.DropReplyTo(releaseScript.Hash(), 1)
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("release of the inner lease, retried after its lost reply: %v", err)
	}
	if proxy.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1: the test tested nothing", proxy.Dropped())
	}
	if holds, _ := rdb.HGet(ctx, "lock:{k}", owner).Int(); holds != 1 {
		t.Errorf("%d holds of the owner after the inner release, want 1: the outer lease's", holds)
	}
	if err := outer.Release(ctx); err != nil {
		t.Errorf("release of the outer lease: %v, want its hold still there", err)
	}
	if n := rdb.Exists(ctx, "lock:{k}").Val(); n != 0 {
		t.Errorf("lock:{k} %v is held after both releases", rdb.HGetAll(ctx, "lock:{k}").Val())
	}
}
