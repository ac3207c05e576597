package rlock

import (
	"context"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// Two goroutines of one owner wait for a key held elsewhere: when the first gets it, the second must
// re-enter, not wait. It once was promoted with tryNow=false and waited for an unlock message although its
// own owner now held the key (a reentry "never waits"); if the first waited for the second, they
// deadlocked until ctx ended.
func TestSameOwnerWaiterReentersWhenItsOwnerGetsTheLock(t *testing.T) {
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
