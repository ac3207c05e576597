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

	"github.com/stockflow/stockflow/internal/redistest"
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
	var took [3]atomic.Int64 // acquisitions that included A, B, C
	var failures atomic.Int64
	var rounds [12]atomic.Int64 // per goroutine
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			l, set := lockers[g%2], sets[g%len(sets)]
			for time.Now().Before(deadline) {
				m, err := AcquireAll(ctx, l, set)
				if err != nil {
					failures.Add(1)
					t.Errorf("goroutine %d, keys %v: %v", g, set, err)
					return
				}
				for _, key := range m.Keys() {
					if err := section(ctx, rdb, "counter:"+key); err != nil {
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

// All or none: a set whose middle key another owner holds fails within the set's wait, naming that key,
// and leaves the key before it free and the key after it untaken.
func TestAcquireAllIsAllOrNone(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	other := mustAcquire(t, newLocker(t, s, Config{}), ctx, "B")
	defer other.Release(ctx)
	start := time.Now()
	_, err := AcquireAll(WithWaitDeadline(ctx, time.Now().Add(300*time.Millisecond)), l, []string{"C", "B", "A"})
	if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "lock B of 3 keys") {
		t.Fatalf("err %v, want ErrNotObtained naming B", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("gave up after %v, want about the set's wait of 300ms", took)
	}
	rdb := s.Client()
	if n := rdb.Exists(ctx, namesFor("A").lock, namesFor("C").lock).Val(); n != 0 {
		t.Fatalf("%d of A and C left locked", n)
	}
	a, err := newLocker(t, s, Config{}).TryAcquire(ctx, "A")
	if err != nil {
		t.Fatalf("A not free after the set failed: %v", err)
	}
	_ = a.Release(ctx)
}

// Under the MultiLease's context an Acquire of one of its keys re-enters with the set's token, and a lost
// lease ends the MultiLease's context with ErrLockLost.
func TestMultiLeaseReentersAndEndsWhenALeaseIsLost(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	m, err := AcquireAll(ctx, l, []string{"B", "A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.Keys()); got != "[A B]" {
		t.Fatalf("keys %s, want [A B]", got)
	}
	b := m.Leases()[1]
	inner := mustAcquire(t, l, m.Context(), "B")
	if !StatsOf(inner).Reentry || inner.Token() != b.Token() || b.Token() == 0 {
		t.Fatalf("nested acquire of B: reentry %v token %d, want a reentry with the set's token %d",
			StatsOf(inner).Reentry, inner.Token(), b.Token())
	}
	_ = inner.Release(ctx)
	s.Client().Del(ctx, namesFor("A").lock)
	if _, err := m.Leases()[0].TTL(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("TTL of the deleted lock: %v, want ErrNotHeld", err)
	}
	select {
	case <-m.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the MultiLease's context did not end when one of its leases was lost")
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := m.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release after a lost lease: %v, want it to report ErrNotHeld", err)
	}
	if s.Client().Exists(ctx, namesFor("B").lock).Val() != 0 {
		t.Fatal("B still locked after the release")
	}
}
