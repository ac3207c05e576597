package rlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// lockers returns a Reentrant (on the first server) and a Redlock (on all three), each with a second locker
// of the same kind, as another process would have, for the same tests.
func lockers(t *testing.T, cfg Config) (servers []*redistest.Server, cases []lockerCase) {
	servers = redistest.StartN(t, 3)
	return servers, []lockerCase{
		{"reentrant", newLocker(t, servers[0], cfg), newLocker(t, servers[0], cfg), servers[:1]},
		{"redlock", newRedlock(t, servers, cfg), newRedlock(t, servers, cfg), servers},
	}
}

type lockerCase struct {
	name          string
	locker, other Locker
	servers       []*redistest.Server // where the lock lives
}

// holds returns the hold count of owner on key on every server of the case, once the calls a Redlock
// acquisition or release left out (it returns at a majority) were answered.
func (c lockerCase) holds(t *testing.T, key, owner string) []int {
	settled(c.locker)
	var out []int
	for _, s := range c.servers {
		n, _ := s.Client().HGet(context.Background(), namesFor(key).lock, owner).Int()
		out = append(out, n)
	}
	return out
}

func TestNestedAcquireUnderLeaseContextReenters(t *testing.T) {
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			outer := mustAcquire(t, c.locker, ctx, "k")
			owner := OwnerFrom(outer.Context())
			if owner == "" {
				t.Fatal("the lease's context carries no owner")
			}
			// Acquire, not TryAcquire: a nested call that does not re-enter waits for itself until this ends.
			nctx, cancel := context.WithTimeout(outer.Context(), 2*time.Second)
			defer cancel()
			inner, err := c.locker.Acquire(nctx, "k")
			if err != nil {
				t.Fatalf("nested acquire under the lease's context: %v, want a reentry", err)
			}
			if !StatsOf(inner).Reentry || inner.Token() != outer.Token() {
				t.Fatalf("nested lease: reentry %v token %d, want a reentry with the outer token %d",
					StatsOf(inner).Reentry, inner.Token(), outer.Token())
			}
			for i, n := range c.holds(t, "k", owner) {
				if n != 2 {
					t.Fatalf("server %d: %d holds of the owner, want 2", i, n)
				}
			}
			// The owner is the lease's, not every caller's: the same locker without it is another owner.
			if _, err := c.locker.TryAcquire(ctx, "k"); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("acquire outside the lease's context: %v, want ErrNotObtained", err)
			}
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.other.TryAcquire(ctx, "k"); !errors.Is(err, ErrNotObtained) || outer.Context().Err() != nil {
				t.Fatalf("after the nested release: other owner %v, outer context %v; want the lock still held",
					err, outer.Context().Err())
			}
			if err := outer.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lz, err := c.other.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("after both releases: %v, want the lock free", err)
			}
			_ = lz.Release(ctx)
		})
	}
}

func TestExtendAndTTL(t *testing.T) {
	const lease = 900 * time.Millisecond // the watchdog renews every 300 ms
	_, cases := lockers(t, Config{Lease: lease})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			l := mustAcquire(t, c.locker, ctx, "k")
			if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 || ttl > lease {
				t.Fatalf("TTL after acquiring: %v, %v; want in (0, %v]", ttl, err, lease)
			}
			if err := l.Extend(ctx, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			c.wantTTL(t, l, 4*time.Second, "after Extend(5s)")
			// Neither the watchdog's renewals, a reentry, its release, nor a shorter Extend shorten it.
			time.Sleep(lease / 2)
			inner := mustAcquire(t, c.locker, l.Context(), "k")
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c.wantTTL(t, l, 3*time.Second, "after renewals, a reentry and Extend(100ms)")

			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Extend after Release: %v, want ErrNotHeld", err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("TTL after Release: %v, want ErrNotHeld", err)
			}
		})
	}
}

// wantTTL checks that the lease's TTL, and the lock's PTTL on every server, is above min and at most 5 s.
func (c lockerCase) wantTTL(t *testing.T, l Lease, min time.Duration, when string) {
	t.Helper()
	ttl, err := l.TTL(context.Background())
	if err != nil || ttl <= min || ttl > 5*time.Second {
		t.Fatalf("%s: TTL %v, %v; want in (%v, 5s]", when, ttl, err, min)
	}
	for i, s := range c.servers {
		if pttl := s.Client().PTTL(context.Background(), namesFor("k").lock).Val(); pttl <= min {
			t.Fatalf("%s: server %d keeps the lock %v, want over %v", when, i, pttl, min)
		}
	}
}

// Extend and TTL find a lock that is gone: the lease ends as lost at once, not at the next renewal.
func TestExtendAndTTLOfALostLockEndTheLease(t *testing.T) {
	_, cases := lockers(t, Config{})
	ops := map[string]func(Lease) error{
		"Extend": func(l Lease) error { return l.Extend(context.Background(), time.Minute) },
		"TTL":    func(l Lease) error { _, err := l.TTL(context.Background()); return err },
	}
	for _, c := range cases {
		for name, op := range ops {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				key := "lost-" + name
				l := mustAcquire(t, c.locker, context.Background(), key)
				for _, s := range c.servers {
					s.Client().Del(context.Background(), namesFor(key).lock)
				}
				if err := op(l); !errors.Is(err, ErrNotHeld) {
					t.Fatalf("%s of a deleted lock: %v, want ErrNotHeld", name, err)
				}
				if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
					t.Fatalf("lease context cause %v, want ErrLockLost at once (the next renewal is 10 s away)", cause)
				}
			})
		}
	}
}

// An extended lease stays valid by the local clock too: Redis answering nothing for longer than the lease
// (but less than the extension) must not end it, as Redis keeps the lock that long.
func TestExtendedLeaseSurvivesAStallPastTheLease(t *testing.T) {
	const lease = 600 * time.Millisecond
	s := redistest.Start(t)
	l := mustAcquire(t, newLocker(t, s, Config{Lease: lease}), context.Background(), "k")
	if err := l.Extend(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	time.Sleep(3 * lease)
	s.Resume()
	if err := l.Context().Err(); err != nil {
		t.Fatalf("extended lease ended during a stall shorter than the extension: %v", context.Cause(l.Context()))
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
