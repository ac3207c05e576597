package rlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// newRedlock returns a Redlock with its own clients, as a separate process would have.
func newRedlock(t testing.TB, servers []*redistest.Server, cfg Config) *Redlock {
	t.Helper()
	var clients []redis.UniversalClient
	for _, s := range servers {
		clients = append(clients, s.Client())
	}
	l, err := NewRedlock(clients, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestRedlockNeedsThreeMasters(t *testing.T) {
	servers := redistest.StartN(t, 2)
	_, err := NewRedlock([]redis.UniversalClient{servers[0].Client(), servers[1].Client()}, Config{})
	if err == nil {
		t.Fatal("Redlock over 2 masters accepted")
	}
}

func TestRedlockMutualExclusion(t *testing.T) {
	const lockers, goroutines, perGoroutine = 3, 16, 63 // 3,024 sections
	servers := redistest.StartN(t, 5)
	counter := servers[0].Client()
	ctx := context.Background()
	var wg sync.WaitGroup
	for range lockers {
		// A node timeout for a loaded test machine (48 goroutines on five masters beside other packages'
		// tests): the default 50 ms once failed a release on every master. Exclusion does not depend on it.
		l := newRedlock(t, servers, Config{NodeTimeout: time.Second})
		for range goroutines {
			wg.Go(func() {
				for range perGoroutine {
					lease, err := l.Acquire(ctx, "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if err := section(lease.Context(), counter, "counter"); err != nil {
						t.Error(err)
					}
					if err := lease.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got, _ := counter.Get(ctx, "counter").Int(); got != lockers*goroutines*perGoroutine {
		t.Fatalf("counter = %d after %d sections: mutual exclusion broken", got, lockers*goroutines*perGoroutine)
	}
}

func TestRedlockSurvivesMinorityAndFailsWithoutQuorum(t *testing.T) {
	servers := redistest.StartN(t, 5)
	l := newRedlock(t, servers, Config{MaxWait: 300 * time.Millisecond})
	ctx := context.Background()
	acquireRelease := func() error {
		lease, err := l.Acquire(ctx, "sku-1")
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}

	servers[0].Kill()
	servers[1].Kill()
	for range 5 {
		if err := acquireRelease(); err != nil {
			t.Fatalf("with 3 of 5 masters: %v", err)
		}
	}

	servers[2].Kill()
	start := time.Now()
	_, err := l.Acquire(ctx, "sku-1")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrQuorum) {
		t.Fatalf("with 2 of 5 masters: %v, want ErrNotObtained and ErrQuorum", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("failed after %v, want within the max wait (300ms) plus one attempt", took)
	}
	var nodeErr *NodeError
	if !errors.As(err, &nodeErr) || nodeErr.Addr == "" {
		t.Fatalf("no *NodeError in %v", err)
	}
	for _, s := range servers[3:] {
		if n := s.Client().Exists(ctx, "lock:{sku-1}").Val(); n != 0 {
			t.Fatalf("live master %s keeps a partial lock", s.Addr)
		}
	}

	for _, s := range servers[:3] {
		s.Restart()
	}
	if err := acquireRelease(); err != nil {
		t.Fatalf("after the restarts: %v", err)
	}
}

func TestRedlockPausedMasterCostsAtMostTheNodeTimeout(t *testing.T) {
	servers := redistest.StartN(t, 5)
	l := newRedlock(t, servers, Config{})
	ctx := context.Background()
	warmUp(t, l)
	servers[4].Pause()
	defer servers[4].Resume()
	// Far below what waiting for the paused master would cost (the client's read timeout, 3 s), loose
	// enough for a loaded machine.
	const bound = DefaultNodeTimeout + 500*time.Millisecond
	for i := range 5 {
		start := time.Now()
		lease, err := l.Acquire(ctx, "sku-1")
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > bound {
			t.Fatalf("acquire %d took %v with one master paused, want <= %v", i, took, bound)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// newRedlockWithASlowMaster returns a Redlock over five masters whose fifth is reached through a delayProxy.
func newRedlockWithASlowMaster(t *testing.T, nodeTimeout time.Duration) (*Redlock, []*redistest.Server, *delayProxy) {
	servers := redistest.StartN(t, 5)
	slow := newDelayProxy(t, servers[4].Addr)
	var clients []redis.UniversalClient
	for _, s := range servers[:4] {
		clients = append(clients, s.Client())
	}
	clients = append(clients, redis.NewClient(&redis.Options{Addr: slow.ln.Addr().String(), ContextTimeoutEnabled: true}))
	t.Cleanup(func() { _ = clients[4].Close() })
	l, err := NewRedlock(clients, Config{NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, servers, slow
}

// An acquisition and a release return once a majority answered, without waiting for a slow master; the
// release reaches that master after the acquisition, so the lock is left on no master once Close has
// waited for the calls still out.
func TestRedlockDoesNotWaitForTheSlowestMaster(t *testing.T) {
	l, servers, slow := newRedlockWithASlowMaster(t, 5*time.Second)
	ctx := context.Background()
	warmUp(t, l)
	const delay = time.Second
	slow.delay.Store(int64(delay)) // the acquisition reaches the slow master a second late
	start := time.Now()
	lease, err := l.Acquire(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	// The release would reach it at once, before the acquisition, once the proxy holds the acquisition
	// (it may not have read it yet: the majority answered first).
	waitFor(t, "the proxy holds the acquisition", func() bool { return slow.held.Load() > 0 })
	slow.delay.Store(0)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= delay/2 {
		t.Fatalf("acquire and release took %v: they waited for the master that answers after %v", took, delay)
	}
	// Close waits for the calls still out. The release is sent to the slow master once it answered the
	// acquisition, so the lock is left on none; had it overtaken the acquisition, the slow master would
	// keep the lock for a whole lease.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("Close returned %v after the acquisition, before the slow master could answer it (%v)", took, delay)
	}
	for _, s := range servers {
		if n := s.Client().Exists(ctx, "lock:{sku-1}").Val(); n != 0 {
			t.Fatalf("master %s keeps the lock after its release", s.Addr)
		}
	}
}

// A call that waits for the call before it on its master keeps its whole node timeout once sent: a master
// slower than the others but within the node timeout answers an acquisition and the release right after
// it, and is not taken for failed (skipped by the next acquisition). (A call waits at most a node timeout
// for the calls before it, so an acquisition right after the release would skip it: 1.2 node timeouts.)
func TestRedlockLaneWaitLeavesTheCallItsNodeTimeout(t *testing.T) {
	const nodeTimeout = time.Second
	l, servers, slow := newRedlockWithASlowMaster(t, nodeTimeout)
	ctx := context.Background()
	warmUp(t, l)
	// Each answer of the slow master takes 0.6 node timeouts: its release waits 0.6 for the grant's
	// answer, then takes 0.6 of its own.
	slow.replyDelay.Store(int64(nodeTimeout * 6 / 10))
	lease, err := l.Acquire(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the release was answered there (1.2 node timeouts), the slow master is not skipped: had the
	// release counted its wait against its node timeout, it would have failed at 1.0 and the master would
	// be skipped for MasterCooldown.
	time.Sleep(nodeTimeout * 13 / 10)
	lease, err = l.Acquire(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	waitFor(t, "the slow master grants the next acquisition", func() bool {
		return servers[4].Client().Exists(ctx, "lock:{sku-1}").Val() == 1
	})
}

func TestRedlockAttemptPastValidityIsUndone(t *testing.T) {
	servers := redistest.StartN(t, 5)
	// The majority answers only after the lease is over: it got the lock, but too late to use it.
	l := newRedlock(t, servers, Config{Lease: 60 * time.Millisecond, NodeTimeout: time.Second})
	ctx := context.Background()
	for _, s := range servers[:3] {
		s.Pause()
	}
	time.AfterFunc(150*time.Millisecond, func() {
		for _, s := range servers[:3] {
			s.Resume()
		}
	})
	_, err := l.TryAcquire(ctx, "sku-1")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrQuorum) {
		t.Fatalf("attempt past its validity: %v, want ErrNotObtained and ErrQuorum", err)
	}
	for _, s := range servers {
		if n := s.Client().Exists(ctx, "lock:{sku-1}").Val(); n != 0 {
			t.Fatalf("master %s keeps the lock of a failed attempt", s.Addr)
		}
	}
}

func TestRedlockFencingTokensIncreaseThroughRestarts(t *testing.T) {
	servers := redistest.StartN(t, 5, redistest.WithPersistence())
	// A short lease: a release that a restarting master missed leaves its copy until the lease ends.
	l := newRedlock(t, servers, Config{Lease: 500 * time.Millisecond})
	ctx := context.Background()
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	var restarts atomic.Int64
	chaos.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			s := servers[rand.N(len(servers))]
			s.Kill()
			time.Sleep(20 * time.Millisecond)
			s.Restart()
			restarts.Add(1)
		}
	})
	var last int64
	// At least 500 acquisitions, and on through 10 restarts so the majorities change whatever the speed.
	n := 0
	for ; n < 500 || restarts.Load() < 10; n++ {
		lease, err := l.Acquire(ctx, "sku-1")
		if err != nil {
			close(stop)
			chaos.Wait()
			t.Fatalf("acquisition %d: %v", n, err)
		}
		if lease.Token() <= last {
			close(stop)
			chaos.Wait()
			t.Fatalf("acquisition %d: token %d after %d", n, lease.Token(), last)
		}
		last = lease.Token()
		_ = lease.Release(ctx) // may fail while a master restarts: the lock then expires
	}
	close(stop)
	chaos.Wait()
	t.Logf("%d increasing tokens through %d master restarts", n, restarts.Load())
}

func TestRedlockWatchdog(t *testing.T) {
	const lease = 600 * time.Millisecond
	servers := redistest.StartN(t, 5)
	l := newRedlock(t, servers, Config{Lease: lease})
	ctx := context.Background()
	lz := mustAcquire(t, l, ctx, "sku-1")
	time.Sleep(3 * lease)
	if err := lz.Context().Err(); err != nil {
		t.Fatalf("lease ended while renewed: %v", context.Cause(lz.Context()))
	}
	for _, s := range servers {
		if s.Client().PTTL(ctx, "lock:{sku-1}").Val() <= 0 {
			t.Fatalf("master %s lost the lock while it was renewed", s.Addr)
		}
	}
	killed := time.Now()
	for _, s := range servers[:3] {
		s.Kill()
	}
	select {
	case <-lz.Context().Done():
		if !errors.Is(context.Cause(lz.Context()), ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", context.Cause(lz.Context()))
		}
		// The next renewal, at most one period later, finds no majority.
		if took := time.Since(killed); took > lease/3+150*time.Millisecond {
			t.Fatalf("lost %v after the majority died, want <= one renewal period (%v) + 150ms", took, lease/3)
		}
	case <-time.After(3 * lease):
		t.Fatal("lease survived the loss of the majority")
	}
}

// A nested (reentrant) Redlock acquire whose ctx is already cancelled must leave the outer hold alone. It
// once ran undo() on every master, decrementing the OUTER hold (the reentry's scripts never ran): the lock
// was deleted on all masters and another locker took it while the outer lease's context was still live.
func TestRedlockCancelledReentryKeepsOuterHold(t *testing.T) {
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

// A Redlock waiter must not spin while the holder holds only a majority. It once did: every failed attempt
// grabbed the free masters, undo() deleted them there and PUBLISHed "0", which woke this same waiter (and
// every other process's head) at once.
func TestRedlockWaiterDoesNotSpinOnItsOwnUndo(t *testing.T) {
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

// warmUp takes and releases a lock on l once: its connections are dialled and its scripts loaded.
func warmUp(t *testing.T, l Locker) {
	t.Helper()
	lease, err := l.Acquire(context.Background(), "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	settled(l) // the release's last calls, lest a test's delays apply to them
}

// settled waits for the calls that a Redlock's acquisitions and releases left out when they returned at a
// majority; other lockers leave none.
func settled(l Locker) {
	if r, ok := l.(*Redlock); ok {
		r.nodes.pending.Wait()
	}
}

// The calls on a lock keep their order on a master through a call that gave up waiting for the call
// before it: the call after that one still waits for the earlier call, rather than overtaking it once the
// unsent call's round returned. (The calls here are stand-ins that note when they run on master 0; no
// Redis is called.)
func TestLanesKeepTheOrderThroughAnUnsentCall(t *testing.T) {
	clients := make([]redis.UniversalClient, 3)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	}
	const timeout = 400 * time.Millisecond
	r := redlockNodes{clients: clients, timeout: timeout, quorum: 2, lanes: new(sync.Map),
		workers: newWorkers(time.Second), pending: new(sync.WaitGroup)}
	var mu sync.Mutex
	var order []string
	slowGrant := make(chan struct{})
	gatherAs := func(name string) <-chan struct{} {
		answered := 0
		return gather(r, context.Background(), "lock:{k}", fanOut[int]{
			call: func(_ context.Context, _ int, c redis.UniversalClient) (int, error) {
				if c == clients[0] {
					if name == "first" {
						<-slowGrant
					}
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
				}
				return 0, nil
			},
			take: func(answer[int]) bool { answered++; return answered >= 2 },
			rest: func(*lane, []answer[int]) {},
		})
	}
	gatherAs("first") // its call on master 0 is slow
	second := gatherAs("second")
	<-second // master 0's call gave up waiting for the first's (one timeout): unsent
	time.Sleep(timeout / 4)
	gatherAs("third") // must wait for the first's call on master 0, not overtake it
	time.Sleep(timeout / 2)
	close(slowGrant)
	r.pending.Wait()
	if got := strings.Join(order, ","); got != "first,third" {
		t.Fatalf("calls on master 0 ran in the order %s, want first,third (second unsent)", got)
	}
	for _, c := range clients {
		_ = c.Close()
	}
}
