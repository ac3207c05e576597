package rlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// A renewal's lease counts from when it was sent, not from its reply: Redis extended the lock when the
// renewal reached it, at the latest as the reply left. Counted from a slow reply, the local lease would
// outlast Redis's, and a holder would go on writing after the lock expired and another owner took it. Here
// the replies take a second, then the renewals stop reaching Redis: the lease's context must end before the
// lock expires in Redis (by the drift allowed, 52 ms).
func TestRenewalLeaseCountsFromItsSend(t *testing.T) {
	const lease = 5 * time.Second // renewed every 1.67 s
	s := redistest.Start(t)
	p := newDelayProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String()}) // reads wait 3 s, longer than a reply
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewReentrant(c, Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, rdb := context.Background(), s.Client()
	if err := renewScript.Load(ctx, rdb).Err(); err != nil { // a renewal is one round trip
		t.Fatal(err)
	}
	held := mustAcquire(t, l, ctx, "k")
	acquired := time.Now()
	// A pipeline's connection dialled (pipelines have their own): a renewal pays no handshake round trips.
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	p.replyDelay.Store(int64(time.Second))

	// The first renewal reaches Redis a third of the lease later: the lock's lease jumps back up.
	last := rdb.PTTL(ctx, "lock:{k}").Val()
	waitFor(t, "the first renewal", func() bool {
		pttl := rdb.PTTL(ctx, "lock:{k}").Val()
		renewed := pttl > last+100*time.Millisecond
		last = pttl
		return renewed
	})
	p.delay.Store(int64(5 * time.Second)) // no later renewal reaches Redis in time
	renewedAt := time.Now()

	ended, expired := endAndExpiry(t, held, rdb, "lock:{k}")
	t.Logf("after the acquisition: renewed in Redis at %v, the lease's context ended at %v (%v), the lock "+
		"expired in Redis at %v", renewedAt.Sub(acquired), ended.Sub(acquired), context.Cause(held.Context()),
		expired.Sub(acquired))
	if !ended.Before(expired) {
		t.Errorf("the lease's context ended %v after its lock expired in Redis: the renewal's lease was "+
			"counted from its reply", ended.Sub(expired))
	}
}

// endAndExpiry returns when the context of held ended and when its lock, lock, expired in Redis.
func endAndExpiry(t *testing.T, held Lease, rdb *redis.Client, lock string) (ended, expired time.Time) {
	t.Helper()
	ctx := context.Background()
	gone := make(chan time.Time, 1)
	go func() {
		for rdb.Exists(ctx, lock).Val() == 1 { // each check expires the key on time
			time.Sleep(time.Millisecond)
		}
		gone <- time.Now()
	}()
	select {
	case <-held.Context().Done():
		return time.Now(), <-gone
	case expired = <-gone:
	}
	select {
	case <-held.Context().Done():
		return time.Now(), expired
	case <-time.After(2 * time.Second):
		t.Fatal("the lease's context did not end within 2 s of its lock's expiry in Redis")
	}
	return
}

// validity is until when the hold of l is safe by the local clock: when it is declared lost unless renewed.
func validity(l Lease) time.Time {
	ll := l.(*lease)
	ll.e.dog.mu.Lock()
	defer ll.e.dog.mu.Unlock()
	return ll.h.valid
}

// A renewal never moves a hold's validity backwards. The renew script never shortens the lock in Redis, so
// a renewal whose reply computes an earlier validity (a slow renewal, the watchdog's after an Extend beyond
// the lease, a shorter Extend) leaves the lock as long in Redis as before, and the hold must not be
// declared lost sooner than that.
func TestRenewalNeverMovesTheHoldsValidityBackwards(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, Config{}) // a 30 s lease: the loop renews nothing meanwhile
	ctx, rdb := context.Background(), s.Client()
	held := mustAcquire(t, l, ctx, "k")
	if err := held.Extend(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	extended := validity(held)
	if until := time.Until(extended); until < 59*time.Minute {
		t.Fatalf("the hold is valid for %v after Extend(1h)", until)
	}

	l.e.dog.renewRound([]*hold{held.(*lease).h}, l.e.cfg.Lease/3) // the watchdog's renewal: one lease
	if err := held.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, "lock:{k}").Val(); pttl < 59*time.Minute {
		t.Fatalf("the lock lasts %v in Redis after the shorter renewals, want the hour still", pttl)
	}
	if got := validity(held); !got.Equal(extended) {
		t.Errorf("the hold is valid for %v after the shorter renewals, want %v as after Extend(1h)",
			time.Until(got).Round(time.Second), time.Until(extended).Round(time.Second))
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
