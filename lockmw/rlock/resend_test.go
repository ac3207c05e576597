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
