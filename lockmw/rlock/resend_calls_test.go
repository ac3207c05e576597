package rlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// Every mutating call of rlock is safe to resend: go-redis sends a command again when its connection broke
// before the reply came (MaxRetries, 3 by default), and Redis may have run it already. Each case makes one
// call whose reply a proxy drops (go-redis then resends it) and checks that Redis holds what one call would
// leave and that the caller's view (held or not, token, count) matches Redis, on each path the call takes:
// a lone call, a call in a batch of concurrent callers' scripts (one pipeline, resent whole), and Redlock's
// masters, each through its own proxy.
func TestEveryMutatingCallSurvivesALostReply(t *testing.T) {
	rs := startRigServers(t)
	for i, tc := range []struct {
		name  string
		paths []string // the paths where the call exists; nil: all
		run   func(t *testing.T, r rig, key string)
	}{
		{"a fresh acquisition holds once", nil, resendAcquire},
		{"a reentry counts one hold more", nil, resendReentry},
		{"the release of a reentrant hold takes one away", nil, resendPartialRelease},
		{"the last release frees the lock once and reports it freed", nil, resendLastRelease},
		{"the undo of a timed-out acquisition takes back exactly what it took", nil, resendUndo},
		{"the undo of a timed-out reentry keeps the outer hold", nil, resendReentryUndo},
		{"an extension lasts the extension", []string{pathSingle, pathRedlock}, resendExtend},
		{"the watchdog's renewals of several holds last one lease", []string{pathSingle, pathRedlock}, resendRenewal},
		{"a raise of the fencing counter raises it to the token", []string{pathSingle, pathRedlock}, resendRaiseToken},
		{"a force release spares the lock its waiter takes next", []string{pathSingle}, resendForceRelease},
		{"a release in the caller's pipeline frees the lock", []string{pathSingle}, resendReleaseIn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range rs.rigs(t, Config{Lease: 3 * time.Second, NodeTimeout: 2 * time.Second}) {
				if tc.paths != nil && !slices.Contains(tc.paths, r.name) {
					continue
				}
				t.Run(r.name, func(t *testing.T) { tc.run(t, r, strconv.Itoa(i)+"-"+r.name) })
			}
		})
	}
}

const (
	pathSingle  = "reentrant"
	pathBatched = "reentrant-batched"
	pathRedlock = "redlock"
)

// rigServers are the servers of the rigs, each behind its proxy: one for Reentrant, three for Redlock.
type rigServers struct {
	servers  []*redistest.Server
	droppers []*redistest.ReplyDropper
}

// startRigServers starts the servers with the lock scripts loaded: a dropped reply is then a script's, not
// the NOSCRIPT that precedes its first run.
func startRigServers(t *testing.T) rigServers {
	rs := rigServers{servers: redistest.StartN(t, 4)}
	for _, s := range rs.servers {
		rs.droppers = append(rs.droppers, redistest.NewReplyDropper(t, s.Addr))
		for _, script := range []*redis.Script{acquireScript, releaseScript, undoScript, renewScript,
			raiseTokenScript, forceReleaseScript, slowScript} {
			if err := script.Load(context.Background(), s.Client()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rs
}

// rig is one path of the calls to Redis: its locker's clients go through the reply droppers.
type rig struct {
	name     string
	l        Locker
	other    Locker // another process's locker, whose clients go to the servers directly
	clients  []redis.UniversalClient
	servers  []*redistest.Server
	droppers []*redistest.ReplyDropper
	batcher  *batcher // batched: calls are made while maxInFlight round trips are out
}

// rigs returns the paths with lockers of their own (clients, breakers, watchdog): a case leaves nothing
// behind in them for the next.
func (rs rigServers) rigs(t *testing.T, cfg Config) []rig {
	clients := make([]redis.UniversalClient, len(rs.droppers))
	for i, d := range rs.droppers {
		c := redis.NewClient(&redis.Options{Addr: d.Addr})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	single, err := NewReentrant(clients[0], cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = single.Close() })
	quorum, err := NewRedlock(clients[1:], cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quorum.Close() })
	one := rig{l: single, other: newLocker(t, rs.servers[0], cfg), clients: clients[:1], servers: rs.servers[:1],
		droppers: rs.droppers[:1]}
	batched := one
	one.name, batched.name, batched.batcher = pathSingle, pathBatched, single.node.run.(*batcher)
	return []rig{one, batched, {name: pathRedlock, l: quorum, other: newRedlock(t, rs.servers[1:], cfg),
		clients: clients[1:], servers: rs.servers[1:], droppers: rs.droppers[1:]}}
}

// drop makes every server's proxy drop the replies of the next n runs of script; the function returned
// checks, once the call was made, that they were dropped.
func (r rig) drop(script *redis.Script, n int) func(t *testing.T) {
	return r.dropEach(map[*redis.Script]int{script: n})
}

// dropEach is drop for several scripts.
func (r rig) dropEach(runs map[*redis.Script]int) func(t *testing.T) {
	settled(r.l) // the calls a Redlock left out when it returned at a majority are not the ones to drop
	before := make([]int, len(r.droppers))
	want := 0
	for i, d := range r.droppers {
		before[i] = d.Dropped()
		for script, n := range runs {
			d.DropReplyTo(script.Hash(), n)
			want += n
		}
	}
	want /= len(r.droppers)
	return func(t *testing.T) {
		t.Helper()
		settled(r.l)
		for i, d := range r.droppers {
			if got := d.Dropped() - before[i]; got != want {
				t.Fatalf("server %d: %d replies dropped, want %d: the case tested nothing", i, got, want)
			}
		}
	}
}

// call makes call, in a batch when the rig batches: while maxInFlight slow scripts are out, the scripts
// call runs queue, and go in one pipeline when the first slow script comes back.
func (r rig) call(t *testing.T, call func()) {
	t.Helper()
	if r.batcher == nil {
		call()
		return
	}
	b, ctx := r.batcher, context.Background()
	var slow sync.WaitGroup
	for range maxInFlight {
		slow.Go(func() { b.run(ctx, slowScript, []string{"slow"}, 200) })
	}
	waitFor(t, "round trips in flight", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inFlight == maxInFlight })
	var queued atomic.Bool
	stop := make(chan struct{})
	go func() {
		for ; !queued.Load(); time.Sleep(100 * time.Microsecond) {
			b.mu.Lock()
			queued.Store(len(b.queue) > 0)
			b.mu.Unlock()
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	call()
	close(stop)
	slow.Wait()
	if !queued.Load() {
		t.Fatal("the call did not queue for a batch: the case tested the lone path")
	}
}

// wantHolds checks that on every server of the rig owner holds key n times, alone (n 0: nobody holds it).
func (r rig) wantHolds(t *testing.T, key, owner string, n int) {
	t.Helper()
	settled(r.l)
	for i, s := range r.servers {
		got := s.Client().HGetAll(context.Background(), namesFor(key).lock).Val()
		if (n == 0 && len(got) != 0) || (n > 0 && (len(got) != 1 || got[owner] != strconv.Itoa(n))) {
			t.Errorf("server %d: lock %v, want %d holds of %s", i, got, n, owner)
		}
	}
}

// wantCounter checks the fencing counter of key on every server.
func (r rig) wantCounter(t *testing.T, key string, want int64) {
	t.Helper()
	for i, s := range r.servers {
		if got, _ := s.Client().Get(context.Background(), namesFor(key).token).Int64(); got != want {
			t.Errorf("server %d: fencing counter %d, want %d", i, got, want)
		}
	}
}

// unlockMessages subscribes to key's unlock channel on every server; the function returned counts the
// messages received by then (waiting 100 ms for late ones).
func (r rig) unlockMessages(t *testing.T, key string) func() int {
	var got atomic.Int64
	for _, s := range r.servers {
		sub := s.Client().Subscribe(context.Background(), namesFor(key).channel)
		t.Cleanup(func() { _ = sub.Close() })
		if _, err := sub.Receive(context.Background()); err != nil { // the subscription is confirmed
			t.Fatal(err)
		}
		go func() {
			for range sub.Channel() {
				got.Add(1)
			}
		}()
	}
	return func() int { time.Sleep(100 * time.Millisecond); return int(got.Load()) }
}

func resendAcquire(t *testing.T, r rig, key string) {
	ctx := context.Background()
	dropped := r.drop(acquireScript, 1)
	var lease Lease
	r.call(t, func() { lease = mustAcquire(t, r.l, ctx, key) })
	dropped(t)
	r.wantHolds(t, key, OwnerFrom(lease.Context()), 1)
	r.wantCounter(t, key, lease.Token())
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.wantHolds(t, key, "", 0)
}

func resendReentry(t *testing.T, r rig, key string) {
	ctx := context.Background()
	outer := mustAcquire(t, r.l, ctx, key)
	owner := OwnerFrom(outer.Context())
	dropped := r.drop(acquireScript, 1)
	var inner Lease
	r.call(t, func() { inner = mustAcquire(t, r.l, outer.Context(), key) })
	dropped(t)
	if !StatsOf(inner).Reentry || inner.Token() != outer.Token() {
		t.Errorf("reentry %v with token %d, want a reentry with the outer token %d", StatsOf(inner).Reentry,
			inner.Token(), outer.Token())
	}
	r.wantHolds(t, key, owner, 2)
	r.wantCounter(t, key, outer.Token())
	for held, l := range []Lease{inner, outer} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r.wantHolds(t, key, owner, 1-held)
	}
}

func resendPartialRelease(t *testing.T, r rig, key string) {
	ctx := context.Background()
	outer := mustAcquire(t, r.l, ctx, key)
	inner := mustAcquire(t, r.l, outer.Context(), key)
	owner := OwnerFrom(outer.Context())
	dropped := r.drop(releaseScript, 1)
	var err error
	r.call(t, func() { err = inner.Release(ctx) })
	dropped(t)
	if err != nil {
		t.Fatal(err)
	}
	r.wantHolds(t, key, owner, 1)
	if outer.Context().Err() != nil {
		t.Fatal("the outer lease ended with the inner one's release")
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("the outer release after the inner one's: %v", err)
	}
	r.wantHolds(t, key, owner, 0)
}

func resendLastRelease(t *testing.T, r rig, key string) {
	ctx := context.Background()
	lease := mustAcquire(t, r.l, ctx, key)
	messages := r.unlockMessages(t, key)
	dropped := r.drop(releaseScript, 1)
	var err error
	r.call(t, func() { err = lease.Release(ctx) })
	dropped(t)
	if err != nil {
		t.Fatalf("release: %v, want nil: the lock was held and is free now", err)
	}
	r.wantHolds(t, key, "", 0)
	if n := messages(); n != len(r.servers) {
		t.Errorf("%d unlock messages, want one per server (%d)", n, len(r.servers))
	}
	next, err := r.other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("another owner after the release: %v", err)
	}
	_ = next.Release(ctx)
}

// acquireFails is an acquisition under ctx whose every send's reply is lost (MaxRetries 3: four sends);
// its undo's reply is lost once too.
func (r rig) acquireFails(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	dropped := r.dropEach(map[*redis.Script]int{acquireScript: 4, undoScript: 1})
	var err error
	r.call(t, func() { _, err = r.l.TryAcquire(ctx, key) })
	if err == nil {
		t.Fatal("an acquisition with every reply lost succeeded")
	}
	dropped(t)
}

func resendUndo(t *testing.T, r rig, key string) {
	ctx := context.Background()
	r.acquireFails(t, ctx, key)
	r.wantHolds(t, key, "", 0)
	next, err := r.other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("another owner after the undone acquisition: %v", err)
	}
	_ = next.Release(ctx)
}

func resendReentryUndo(t *testing.T, r rig, key string) {
	ctx := context.Background()
	outer := mustAcquire(t, r.l, ctx, key)
	owner := OwnerFrom(outer.Context())
	r.acquireFails(t, outer.Context(), key)
	r.wantHolds(t, key, owner, 1)
	if outer.Context().Err() != nil {
		t.Fatal("the outer lease ended with the undo of the reentry")
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.wantHolds(t, key, owner, 0)
}

func resendExtend(t *testing.T, r rig, key string) {
	ctx := context.Background()
	lease := mustAcquire(t, r.l, ctx, key)
	dropped := r.drop(renewScript, 1)
	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	dropped(t)
	for i, s := range r.servers {
		if pttl := s.Client().PTTL(ctx, namesFor(key).lock).Val(); pttl < 19*time.Second || pttl > 20*time.Second {
			t.Errorf("server %d: pttl %v after an extension by 20 s", i, pttl)
		}
	}
	r.wantHolds(t, key, OwnerFrom(lease.Context()), 1)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func resendRenewal(t *testing.T, r rig, key string) {
	ctx := context.Background()
	const lease = 3 * time.Second // the rig's
	keys := []string{key + "-a", key + "-b"}
	var leases []Lease
	for _, k := range keys {
		leases = append(leases, mustAcquire(t, r.l, ctx, k))
	}
	acquired, before := time.Now(), r.droppers[0].Dropped()
	dropped := r.drop(renewScript, 1) // the first renewal round: both holds in one pipeline per server
	waitFor(t, "the first renewal", func() bool { return r.droppers[0].Dropped() > before })
	time.Sleep(100 * time.Millisecond) // the resend
	dropped(t)
	for i, k := range keys {
		for j, s := range r.servers {
			if pttl := s.Client().PTTL(ctx, namesFor(k).lock).Val(); pttl < lease-500*time.Millisecond || pttl > lease {
				t.Errorf("%s on server %d: pttl %v after its renewal, want at most the lease %v", k, j, pttl, lease)
			}
		}
		r.wantHolds(t, k, OwnerFrom(leases[i].Context()), 1)
	}
	time.Sleep(time.Until(acquired.Add(lease + 300*time.Millisecond)))
	for i, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s past its first lease: %v", keys[i], err)
		}
	}
}

func resendRaiseToken(t *testing.T, r rig, key string) {
	ctx := context.Background()
	raiser := r.l.(interface {
		RaiseToken(context.Context, string, int64) error
	})
	dropped := r.drop(raiseTokenScript, 1)
	if err := raiser.RaiseToken(ctx, key, 1000); err != nil {
		t.Fatal(err)
	}
	dropped(t)
	r.wantCounter(t, key, 1000)
	lease := mustAcquire(t, r.l, ctx, key)
	if lease.Token() != 1001 {
		t.Errorf("token %d after raising the counter to 1000, want 1001", lease.Token())
	}
	_ = lease.Release(ctx)
}

func resendForceRelease(t *testing.T, r rig, key string) {
	ctx := context.Background()
	holder := mustAcquire(t, r.l, ctx, key)
	waiter := r.other.(*Reentrant)
	got := make(chan Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitSleeping(t, waiter.e, key)
	dropped := r.drop(forceReleaseScript, 1)
	if deleted, err := r.l.(*Reentrant).ForceRelease(ctx, key); err != nil || !deleted {
		t.Fatalf("force release: %v, %v; want a lock deleted", deleted, err)
	}
	dropped(t)
	next := <-got
	if next == nil {
		t.FailNow()
	}
	r.wantHolds(t, key, OwnerFrom(next.Context()), 1)
	if err := holder.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of the forced-out lease: %v, want ErrNotHeld", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Errorf("the waiter's release: %v", err)
	}
}

func resendReleaseIn(t *testing.T, r rig, key string) {
	ctx := context.Background()
	lease := mustAcquire(t, r.l, ctx, key)
	pipe := r.clients[0].Pipeline()
	pipe.Get(ctx, key+"-value")
	finish := ReleaseIn(ctx, pipe, lease)
	dropped := r.drop(releaseScript, 1)
	_, err := pipe.Exec(ctx)
	if err := finish(err); err != nil {
		t.Fatalf("release in a pipeline: %v", err)
	}
	dropped(t)
	r.wantHolds(t, key, "", 0)
}
