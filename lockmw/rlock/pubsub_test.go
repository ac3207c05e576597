package rlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// An unlock published before the key's subscription is confirmed must still wake the queue. It once was a
// lost wake-up: the first waiter (which owns the subscribe-and-wait-until-confirmed step) gave up before
// the SUBSCRIBE was confirmed; the next waiter was promoted with tryNow and attempted at once, without
// waiting for the confirmation. An unlock published before the confirmation was lost, and the first
// confirmation did not notify, so the waiter slept until the holder's PTTL.
func TestUnlockBeforeConfirmationStillWakesNextWaiter(t *testing.T) {
	s := redistest.Start(t)
	const lease = 3 * time.Second
	holder := newLocker(t, s, Config{Lease: lease})
	w := newLocker(t, s, Config{Lease: lease})
	p := newDelayProxy(t, s.Addr)
	psClient := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { psClient.Close() })
	_ = w.e.notifiers[0].close()
	w.e.notifiers = []*notifier{newNotifier(psClient, w.e.queue.notify)}
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

// A waiter that subscribes while the sweep unsubscribes the same idle channel must end up subscribed,
// whichever of the two goes first. The Redis calls run outside the notifier's mutex: were the sweep's
// UNSUBSCRIBE sent after the waiter's SUBSCRIBE, the waiter would count on unlock messages that no longer
// reach it.
func TestSubscribeRacingUnsubscribeStaysSubscribed(t *testing.T) {
	s := redistest.Start(t)
	n := newNotifier(s.Client(), func(string) {})
	t.Cleanup(func() { _ = n.close() })
	ctx := context.Background()
	const channel = "redisson_lock__channel:lock:{k}"
	for i := range 50 {
		waitReady(t, n.hold(channel))
		n.drop(channel)
		n.mu.Lock()
		n.chans[channel].idleSince = time.Now().Add(-unsubscribeAfter) // due for the sweep
		n.mu.Unlock()
		var ready <-chan struct{}
		var wg sync.WaitGroup
		wg.Go(n.sweep)
		wg.Go(func() { ready = n.hold(channel) })
		wg.Wait()
		waitReady(t, ready)
		time.Sleep(20 * time.Millisecond) // an UNSUBSCRIBE sent after the SUBSCRIBE would have landed
		if subs := s.Client().PubSubNumSub(ctx, channel).Val()[channel]; subs != 1 {
			t.Fatalf("iteration %d: %d subscribers to the channel a waiter holds, want 1", i, subs)
		}
		n.drop(channel)
	}
}

func waitReady(t *testing.T, ready <-chan struct{}) {
	t.Helper()
	select {
	case <-ready:
	case <-time.After(time.Second):
		t.Fatal("subscription not confirmed within 1 s")
	}
}
