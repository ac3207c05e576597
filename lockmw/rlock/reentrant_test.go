package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// namesFor are key's names in the default layout.
func namesFor(key string) names { return Config{}.names(key) }

// newLocker returns a locker with its own client and pub/sub connection, as a separate process would have.
func newLocker(t testing.TB, s *redistest.Server, cfg Config) *Reentrant {
	t.Helper()
	l, err := NewReentrant(s.Client(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustAcquire(t testing.TB, l Locker, ctx context.Context, key string) Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return lease
}

// acquireLater acquires key in the background, releases it at once and sends when it got it; it closes the
// channel when the acquisition failed.
func acquireLater(t *testing.T, l Locker, ctx context.Context, key string) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		_ = lease.Release(ctx)
	}()
	return got
}

// section runs a non-atomic read-modify-write of counter: without mutual exclusion, updates get lost.
func section(ctx context.Context, rdb *redis.Client, counter string) error {
	v, err := rdb.Get(ctx, counter).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return rdb.Set(ctx, counter, v+1, 0).Err()
}

func TestMutualExclusion(t *testing.T) {
	const lockers, goroutines, perGoroutine = 3, 16, 105 // 5,040 sections
	s := redistest.Start(t)
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
			ctx := context.Background()
			counter := "counter:" + strconv.FormatBool(locked)
			var wg sync.WaitGroup
			errs := make(chan error, lockers*goroutines)
			for range lockers {
				l := newLocker(t, s, Config{})
				rdb := s.Client()
				for range goroutines {
					wg.Go(func() {
						for range perGoroutine {
							if !locked {
								if err := section(ctx, rdb, counter); err != nil {
									errs <- err
									return
								}
								continue
							}
							lease, err := l.Acquire(ctx, "hot")
							if err != nil {
								errs <- err
								return
							}
							err = section(lease.Context(), rdb, counter)
							if rerr := lease.Release(ctx); err == nil {
								err = rerr
							}
							if err != nil {
								errs <- err
								return
							}
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got, _ := s.Client().Get(ctx, counter).Int()
			const want = lockers * goroutines * perGoroutine
			if locked && got != want {
				t.Fatalf("counter = %d after %d locked sections: mutual exclusion broken", got, want)
			}
			if !locked && got >= want {
				t.Fatalf("counter = %d after %d unlocked sections: the test cannot detect lost updates", got, want)
			}
			t.Logf("counter %d of %d sections", got, want)
		})
	}
}

func TestReentrancy(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{})
	other := newLocker(t, s, Config{})
	ctx := WithOwner(context.Background(), "owner-a")

	outer := mustAcquire(t, l, ctx, "sku-1")
	inner, err := l.TryAcquire(ctx, "sku-1") // a wait here would deadlock: reentry must not queue
	if err != nil {
		t.Fatalf("reentry: %v", err)
	}
	if inner.Token() != outer.Token() {
		t.Fatalf("reentry token %d, want the outer token %d", inner.Token(), outer.Token())
	}
	if !StatsOf(inner).Reentry || StatsOf(outer).Reentry {
		t.Fatalf("reentry flags: outer %v inner %v", StatsOf(outer).Reentry, StatsOf(inner).Reentry)
	}
	if n, _ := rdb.HGet(ctx, "lock:{sku-1}", "owner-a").Int(); n != 2 {
		t.Fatalf("hold count %d, want 2", n)
	}

	got := acquireLater(t, other, context.Background(), "sku-1")

	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.HGet(ctx, "lock:{sku-1}", "owner-a").Int(); n != 1 {
		t.Fatalf("hold count after one release %d, want 1", n)
	}
	if outer.Context().Err() != nil {
		t.Fatal("releasing the inner hold ended the outer lease's context")
	}
	select {
	case <-got:
		t.Fatal("another owner got the lock while owner-a still held it once")
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if wait := at.Sub(released); wait > wokenWithin {
			t.Fatalf("waiter got the lock %v after the release, want <= %v", wait, wokenWithin)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("waiter did not get the lock after the last release")
	}
	if err := outer.Context().Err(); err == nil {
		t.Fatal("released lease's context is not done")
	}
}

// The scripts of Redisson's RedissonLock (tryLockInnerAsync, unlockInnerAsync), as a Java service would run them.
const (
	redissonLock = `if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);`
	redissonUnlock = `local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0;
else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;`
)

func TestRedissonInterop(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	n := namesFor("sku-1")
	const javaOwner = "8743c9c0-0795-4907-87fd-6c719a6b4586:1"

	t.Run("a Redisson lock excludes us until its unlock wakes us", func(t *testing.T) {
		if err := rdb.Eval(ctx, redissonLock, []string{n.lock}, 30000, javaOwner).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("redisson lock: %v", err)
		}
		if _, err := l.TryAcquire(ctx, "sku-1"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("try while Redisson holds: %v, want ErrNotObtained", err)
		}
		got := acquireLater(t, l, ctx, "sku-1")
		time.Sleep(200 * time.Millisecond) // the waiter is queued and subscribed
		released := time.Now()
		err := rdb.Eval(ctx, redissonUnlock, []string{n.lock, n.channel, n.latch("java-req")},
			0, 30000, javaOwner, "publish", 10000).Err()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if wait := at.Sub(released); wait > wokenWithin {
				t.Fatalf("woken %v after Redisson's unlock, want <= %v", wait, wokenWithin)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Redisson's unlock did not wake our waiter")
		}
	})

	t.Run("our lock excludes Redisson", func(t *testing.T) {
		lease := mustAcquire(t, l, ctx, "sku-1")
		pttl, err := rdb.Eval(ctx, redissonLock, []string{n.lock}, 30000, javaOwner).Int64()
		if err != nil || pttl <= 0 {
			t.Fatalf("redisson lock while we hold: pttl %d, %v; want a positive pttl (not acquired)", pttl, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Eval(ctx, redissonLock, []string{n.lock}, 30000, javaOwner).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("redisson lock after our release: %v, want acquired", err)
		}
	})
}

func TestWatchdogKeepsLockAndStopsAfterRelease(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{Lease: time.Second})
	ctx := context.Background()
	lease := mustAcquire(t, l, ctx, "sku-1")
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if pttl := rdb.PTTL(ctx, "lock:{sku-1}").Val(); pttl <= 0 {
			t.Fatalf("lock expired while held (pttl %v)", pttl)
		}
	}
	if lease.Context().Err() != nil {
		t.Fatalf("lease context ended while held: %v", context.Cause(lease.Context()))
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := evalshaCalls(t, rdb)
	time.Sleep(time.Second) // three renewal periods
	if after := evalshaCalls(t, rdb); after != before {
		t.Fatalf("%d scripts ran after the release: the watchdog kept renewing", after-before)
	}
}

// evalshaCalls counts EVALSHA commands the server has run.
func evalshaCalls(t *testing.T, rdb *redis.Client) int {
	info := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func TestLostLease(t *testing.T) {
	const lease = 900 * time.Millisecond
	const margin = 150 * time.Millisecond
	cases := []struct {
		name string
		lose func(t *testing.T, s *redistest.Server, rdb *redis.Client)
		// within: how long after lose the context must be cancelled
		within time.Duration
	}{
		{"deleting the key is noticed at the next renewal", func(t *testing.T, s *redistest.Server, rdb *redis.Client) {
			rdb.Del(context.Background(), "lock:{sku-1}")
		}, lease/3 + margin},
		{"pausing Redis past the lease ends the lease before Redis could expire it", func(t *testing.T, s *redistest.Server, rdb *redis.Client) {
			s.Pause()
			t.Cleanup(s.Resume)
		}, lease + margin},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client()
			l := newLocker(t, s, Config{Lease: lease})
			lz := mustAcquire(t, l, context.Background(), "sku-1")
			lost := time.Now()
			tc.lose(t, s, rdb)
			select {
			case <-lz.Context().Done():
				if cause := context.Cause(lz.Context()); !errors.Is(cause, ErrLockLost) {
					t.Fatalf("cause %v, want ErrLockLost", cause)
				}
				if took := time.Since(lost); took > tc.within {
					t.Fatalf("lease cancelled %v after the loss, want <= %v", took, tc.within)
				}
			case <-time.After(3 * lease):
				t.Fatal("lease context not cancelled after the lock was lost")
			}
		})
	}
}

func TestCrashedHolderLockExpiresToWaiter(t *testing.T) {
	const lease = 500 * time.Millisecond
	s := redistest.Start(t)
	crashing := s.Client()
	holder, err := NewReentrant(crashing, Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	waiter := newLocker(t, s, Config{Lease: lease})
	ctx := context.Background()
	mustAcquire(t, holder, ctx, "sku-1")
	start := time.Now()
	_ = holder.Close()
	_ = crashing.Close() // no release, no more renewals: as if the process died

	lz, err := waiter.Acquire(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	defer lz.Release(ctx)
	if waited := time.Since(start); waited < lease/2 || waited > lease+time.Second {
		t.Fatalf("waiter got the lock after %v; want about the lease (%v): no unlock message was sent", waited, lease)
	}
}

// Tokens grow with every acquisition in Redis; a hand-off within a process keeps its cohort's token, so in
// lock order they never fall and rise at every acquisition that was not handed over.
func TestFencingTokensIncrease(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handOffs int
	}{{"with hand-offs", 0}, {"without hand-offs", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			cfg := Config{HandOff: HandOff{Max: tc.handOffs}}
			lockers := []*Reentrant{newLocker(t, s, cfg), newLocker(t, s, cfg), newLocker(t, s, cfg)}
			held := acquireInTurn(t, lockers, 1000)
			handOffs := 0
			for i := 1; i < len(held); i++ {
				prev, cur := held[i-1], held[i]
				if cur.handOff {
					handOffs++
				}
				if cur.token < prev.token || (!cur.handOff && cur.token == prev.token) {
					t.Fatalf("acquisition %d: token %d after %d (hand-off %v)", i, cur.token, prev.token, cur.handOff)
				}
			}
			if (tc.handOffs < 0) != (handOffs == 0) {
				t.Fatalf("%d hand-offs with HandOff.Max %d", handOffs, tc.handOffs)
			}
			t.Logf("%d of %d acquisitions handed over", handOffs, len(held))
		})
	}
}

type heldToken struct {
	token   int64
	handOff bool
}

// acquireInTurn acquires one key n times from goroutines spread over lockers, every tenth re-entering, and
// returns the tokens in lock order.
func acquireInTurn(t *testing.T, lockers []*Reentrant, n int) []heldToken {
	ctx := context.Background()
	var mu sync.Mutex
	var held []heldToken
	var wg sync.WaitGroup
	for i := range n {
		l := lockers[i%len(lockers)]
		wg.Go(func() {
			owner := WithOwner(ctx, "owner-"+strconv.Itoa(i))
			lease, err := l.Acquire(owner, "sku-1")
			if err != nil {
				t.Error(err)
				return
			}
			defer lease.Release(ctx)
			if i%10 == 0 { // reentry keeps the token
				inner := mustAcquire(t, l, owner, "sku-1")
				if inner.Token() != lease.Token() {
					t.Errorf("reentry token %d != %d", inner.Token(), lease.Token())
				}
				_ = inner.Release(ctx)
			}
			mu.Lock() // inside the lock: appends happen in lock order
			held = append(held, heldToken{lease.Token(), StatsOf(lease).HandOff})
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(held) != n {
		t.Fatalf("%d acquisitions, want %d", len(held), n)
	}
	return held
}

func TestNonOwnerReleaseLeavesLockIntact(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	first := mustAcquire(t, l, ctx, "sku-1")
	if ok, err := l.ForceRelease(ctx, "sku-1"); err != nil || !ok {
		t.Fatalf("force release: %v %v", ok, err)
	}
	second := mustAcquire(t, l, ctx, "sku-1")
	if err := first.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release by the old owner: %v, want ErrNotHeld", err)
	}
	st, err := l.Inspect(ctx, "sku-1")
	if err != nil || st.Holds != 1 || st.Remaining <= 0 {
		t.Fatalf("lock after a non-owner release: %+v %v; want held once with a lease", st, err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release of one lease: %v, want ErrNotHeld", err)
	}
}

func TestCancelledWaiterLeavesNoTrace(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	holder := mustAcquire(t, l, ctx, "sku-1")

	wctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := l.Acquire(wctx, "sku-1")
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancelled := time.Now()
	cancel()
	select {
	case err := <-res:
		if took := time.Since(cancelled); took > wokenWithin { // not at the holder's lease, 30 s away
			t.Fatalf("cancelled acquire returned after %v, want <= %v", took, wokenWithin)
		}
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want ErrNotObtained and context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("cancelled acquire did not return")
	}
	if l.e.queue.busy(namesFor("sku-1").channel) {
		t.Fatal("the cancelled waiter is still queued")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Not queued behind a ghost: a try (which never waits) after the release succeeds.
	lz, err := l.TryAcquire(ctx, "sku-1")
	if err != nil {
		t.Fatalf("acquire after the cancelled waiter: %v", err)
	}
	_ = lz.Release(ctx)
}

func TestMaxWait(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{MaxWait: 100 * time.Millisecond})
	ctx := context.Background()
	holder := mustAcquire(t, l, ctx, "sku-1")
	defer holder.Release(ctx)
	_, err := l.Acquire(ctx, "sku-1")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrNotObtained after the max wait", err)
	}
}

func TestReleaseRetryIsNotAppliedTwice(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	be := singleNode{scripts: newScripts(Config{Lease: time.Minute}, false), rdb: rdb, run: newRunner(rdb)}
	ctx := context.Background()
	n := namesFor("sku-1")
	for i, held := range []bool{false, true} { // a hold and a reentry
		if a, err := be.acquire(ctx, request{n: n, owner: "o", id: strconv.Itoa(i), held: held}); err != nil || !a.ok {
			t.Fatalf("acquire: %+v %v", a, err)
		}
	}
	req := &unlock{n: n, owner: "o", id: "req-1", sent: make([]sends, 1)}
	for try := range 2 { // the same request sent twice, as after a lost reply
		rep, err := be.release(ctx, req)
		if err != nil || rep.left != 1 {
			t.Fatalf("release try %d: %d holds left, %v; want 1", try, rep.left, err)
		}
	}
	if holds, _ := rdb.HGet(ctx, n.lock, "o").Int(); holds != 1 {
		t.Fatalf("%d holds after a retried release, want 1", holds)
	}
}

func TestBadInput(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	for _, key := range []string{"", strings.Repeat("k", MaxKeyLen+1)} {
		if _, err := l.Acquire(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("key of %d bytes: %v, want ErrInvalidKey", len(key), err)
		}
	}
	if _, err := l.Acquire(ctx, strings.Repeat("k", MaxKeyLen)); err != nil {
		t.Errorf("key of %d bytes: %v", MaxKeyLen, err)
	}
	for _, lease := range []time.Duration{-time.Second, time.Millisecond} {
		if _, err := NewReentrant(s.Client(), Config{Lease: lease}); err == nil || !strings.Contains(err.Error(), "Lease") {
			t.Errorf("lease %v: %v, want an error naming Lease", lease, err)
		}
	}
}

// A reentrant acquire by an owner whose hold is gone in Redis (but not yet noticed by the watchdog) is a
// FRESH acquisition in Redis (count 1, new token) and must be kept as one. It once was folded into the
// stale hold (count 2, old token): the outer Release then deleted the lock the inner lease still believed
// it held, and another owner got it while the inner lease's context was live.
func TestReentryIntoLostHoldStartsFreshHold(t *testing.T) {
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

// The Release of a lease that was LOST must not touch its owner's newer hold. It once released by owner id:
// if the same owner had re-acquired meanwhile, the stale lease's Release deleted the new lock and reported
// success.
func TestReleaseOfLostLeaseKeepsSameOwnersNewHold(t *testing.T) {
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

// The undo of a cancelled attempt must land before its owner can acquire again. It once ran in the
// background (abandon()), releasing by owner id: if the same owner acquired again before it landed, the
// undo deleted the new lock.
func TestUndoOfCancelledAttemptSparesSameOwnersNextLock(t *testing.T) {
	s := redistest.Start(t)
	a := newLocker(t, s, Config{Lease: 5 * time.Second})
	b := newLocker(t, s, Config{Lease: 5 * time.Second})
	rdb := s.Client()
	bad := 0
	for i := range 200 {
		ctx := WithOwner(context.Background(), "owner-A")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _ = a.Acquire(cctx, "k") // fails; its undo must land before the next acquisition
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
		t.Errorf("%d of 200 fresh leases had their lock deleted by the previous attempt's undo", bad)
	}
}

// Single node: when the acquire script ran but its reply was lost to a (non-ctx) timeout, the attempt must
// be undone. It once was not: Acquire returned an error and nothing released the lock, so the key was
// blocked for a whole lease.
func TestLostAcquireReplyLeavesNoLock(t *testing.T) {
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

// Closing a locker twice must not panic; it once did.
func TestCloseTwice(t *testing.T) {
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
