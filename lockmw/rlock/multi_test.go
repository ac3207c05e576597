package rlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// Goroutines of two lockers (two processes) take overlapping key sets given in opposite orders (A,B vs
// B,A) and in cycles (A,B / B,C / C,A, and A,B,C backwards) for 10 s: nobody deadlocks, every acquisition
// succeeds, and a non-atomic counter per key loses no update (mutual exclusion per key).
func TestAcquireAllHasNoDeadlock(t *testing.T) {
	run := 10 * time.Second
	if testing.Short() {
		run = 2 * time.Second
	}
	s := redistest.Start(t)
	lockers := []*Reentrant{newLocker(t, s, Config{MaxWait: 5 * time.Second}), newLocker(t, s, Config{MaxWait: 5 * time.Second})}
	sets := [][]string{{"A", "B"}, {"B", "A"}, {"B", "C"}, {"C", "A"}, {"C", "B", "A"}, {"C", "A", "B"}}
	ctx := context.Background()
	rdb := s.Client()
	var took [3]atomic.Int64    // acquisitions that included A, B, C
	var rounds [12]atomic.Int64 // per goroutine
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			l, set := lockers[g%2], sets[g%len(sets)]
			for time.Now().Before(deadline) {
				m, err := AcquireAll(ctx, l, set)
				if err != nil {
					t.Errorf("goroutine %d, keys %v: %v", g, set, err)
					return
				}
				for _, key := range m.Keys() {
					if err := slowSection(ctx, rdb, "counter:"+key); err != nil {
						t.Error(err)
					}
					took[key[0]-'A'].Add(1)
				}
				if err := m.Release(ctx); err != nil {
					t.Errorf("release %v: %v", set, err)
				}
				rounds[g].Add(1)
			}
		})
	}
	wg.Wait()
	for i := range took {
		key := string(rune('A' + i))
		got, _ := rdb.Get(ctx, "counter:"+key).Int64()
		if got != took[i].Load() || got == 0 {
			t.Errorf("counter %s = %d after %d acquisitions of it: updates lost", key, got, took[i].Load())
		}
	}
	var per []int64
	for g := range rounds {
		if per = append(per, rounds[g].Load()); per[g] == 0 {
			t.Errorf("goroutine %d (keys %v) never got its locks", g, sets[g%len(sets)])
		}
	}
	t.Logf("acquisitions per goroutine: %v", per)
	if keys := rdb.Keys(ctx, "lock:*").Val(); len(keys) > 0 {
		t.Errorf("locks left: %v", keys)
	}
}

// slowSection is section with a pause between the read and the write, so that two holders of the same
// key at once would lose an update nearly every time.
func slowSection(ctx context.Context, rdb *redis.Client, counter string) error {
	v, err := rdb.Get(ctx, counter).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	time.Sleep(100 * time.Microsecond)
	return rdb.Set(ctx, counter, v+1, 0).Err()
}

// All or none: a set whose middle key another owner holds fails within the set's wait, naming that key;
// the key before it was taken and is free again, the key after it was never taken.
func TestAcquireAllIsAllOrNone(t *testing.T) {
	_, cases := lockers(t, Config{MaxWait: 5 * time.Second}) // a set's wait not kept fails, not hangs
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			other := mustAcquire(t, c.other, ctx, "B")
			defer other.Release(ctx)
			start := time.Now()
			_, err := AcquireAll(WithWaitDeadline(ctx, time.Now().Add(300*time.Millisecond)), c.locker, []string{"C", "B", "A"})
			if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "lock B of 3 keys") {
				t.Fatalf("err %v, want ErrNotObtained naming B", err)
			}
			if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
				t.Fatalf("gave up after %v, want about the set's wait of 300ms", took)
			}
			settled(c.locker) // A's release returned at a majority
			for i, s := range c.servers {
				rdb := s.Client()
				if n := rdb.Exists(ctx, namesFor("A").lock, namesFor("C").lock).Val(); n != 0 {
					t.Fatalf("server %d: %d of A and C left locked", i, n)
				}
				// The fencing counter counts every acquisition: A's was taken (first), C's never.
				if a, c := rdb.Exists(ctx, TokenKey("A")).Val(), rdb.Exists(ctx, TokenKey("C")).Val(); a != 1 || c != 0 {
					t.Fatalf("server %d: fencing counters of A %d, of C %d; want A taken, C never", i, a, c)
				}
			}
			a, err := c.other.TryAcquire(ctx, "A")
			if err != nil {
				t.Fatalf("A not free after the set failed: %v", err)
			}
			_ = a.Release(ctx)
		})
	}
}

// Under the MultiLease's context an Acquire of one of its keys, or AcquireAll of some of them, re-enters
// with the set's tokens; Release frees every key and ends the context, and a second one says ErrNotHeld.
func TestMultiLeaseReenters(t *testing.T) {
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m, err := AcquireAll(ctx, c.locker, []string{"B", "A", "B"})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(m.Keys()); got != "[A B]" || m.Lease("C") != nil || m.Token("C") != 0 {
				t.Fatalf("keys %s, lease of C %v; want [A B] and no C", got, m.Lease("C"))
			}
			if s := m.Stats(); s.Reentry || s.Attempts < 2 || m.Token("B") == 0 || m.Token("B") != m.Leases()[1].Token() {
				t.Fatalf("stats %+v, token of B %d; want a fresh set of two attempts or more, B's token", s, m.Token("B"))
			}
			nctx, cancel := context.WithTimeout(m.Context(), 2*time.Second) // a nested call that waits fails
			defer cancel()
			inner := mustAcquire(t, c.locker, nctx, "B")
			if !StatsOf(inner).Reentry || inner.Token() != m.Token("B") {
				t.Fatalf("nested acquire of B: reentry %v token %d, want a reentry with the set's token %d",
					StatsOf(inner).Reentry, inner.Token(), m.Token("B"))
			}
			for i, n := range c.holds(t, "B", OwnerFrom(m.Context())) {
				if n != 2 {
					t.Fatalf("server %d: %d holds of B by the set's owner, want 2", i, n)
				}
			}
			_ = inner.Release(ctx)
			nested, err := AcquireAll(nctx, c.locker, []string{"A", "B"})
			if err != nil || !nested.Stats().Reentry || nested.Token("A") != m.Token("A") {
				t.Fatalf("nested AcquireAll: %v, want a reentry of both keys", err)
			}
			_ = nested.Release(ctx)
			if err := m.Release(ctx); err != nil || m.Context().Err() == nil {
				t.Fatalf("release: %v, context %v; want released and the context ended", err, m.Context().Err())
			}
			if err := m.Release(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("second release: %v, want ErrNotHeld", err)
			}
			ab, err := AcquireAll(ctx, c.other, []string{"A", "B"})
			if err != nil {
				t.Fatalf("A and B not free after the release: %v", err)
			}
			_ = ab.Release(ctx)
		})
	}
}

// A lock of the set lost in Redis (deleted) is noticed by the watchdog at its next renewal: the
// MultiLease's context ends with ErrLockLost, while the other lock stays held until the release.
func TestMultiLeaseEndsWhenALeaseIsLost(t *testing.T) {
	const lease = 900 * time.Millisecond // the watchdog renews every 300 ms
	s := redistest.Start(t)
	l := newLocker(t, s, Config{Lease: lease})
	ctx := context.Background()
	m, err := AcquireAll(ctx, l, []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Context().Err() != nil {
		t.Fatalf("context of a fresh set ended: %v", context.Cause(m.Context()))
	}
	rdb := s.Client()
	rdb.Del(ctx, namesFor("A").lock)
	select {
	case <-m.Context().Done():
	case <-time.After(3 * lease):
		t.Fatal("the MultiLease's context did not end when one of its leases was lost")
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := m.Lease("B").Context().Err(); err != nil || rdb.Exists(ctx, namesFor("B").lock).Val() != 1 {
		t.Fatalf("B's lease ended (%v) or its lock is gone with A's", err)
	}
	if err := m.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release after a lost lease: %v, want it to report ErrNotHeld", err)
	}
	if rdb.Exists(ctx, namesFor("B").lock).Val() != 0 {
		t.Fatal("B still locked after the release")
	}
}

// The set's wait ends with the set: past it, neither the MultiLease's context nor its leases' contexts
// are done, and an Acquire under them waits for a held key as any other.
func TestWaitDeadlineEndsWithTheSet(t *testing.T) {
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m, err := AcquireAll(WithWaitDeadline(ctx, time.Now().Add(100*time.Millisecond)), c.locker, []string{"A", "B"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release(ctx)
			time.Sleep(200 * time.Millisecond)
			under := map[string]context.Context{"the set": m.Context(), "the lease of A": m.Lease("A").Context()}
			for name, uctx := range under {
				if uctx.Err() != nil {
					t.Fatalf("context of %s ended with the set's wait: %v", name, context.Cause(uctx))
				}
				held := mustAcquire(t, c.other, ctx, "C")
				released := make(chan struct{})
				time.AfterFunc(100*time.Millisecond, func() { _ = held.Release(ctx); close(released) })
				lease, err := c.locker.Acquire(uctx, "C")
				// The other locker's release is over before the test goes on (and closes the lockers): Redis
				// ordered it before this acquisition, which the race detector cannot see.
				<-released
				if err != nil {
					t.Fatalf("acquire of C under %s, after the set's wait: %v; want it to wait for C", name, err)
				}
				_ = lease.Release(ctx)
			}
		})
	}
}
