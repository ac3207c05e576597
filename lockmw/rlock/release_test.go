package rlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// listenForUnlock listens on key's unlock channel with a plain client, as a Redisson waiter does; the channel
// returned gets each message's payload.
func listenForUnlock(t *testing.T, s *redistest.Server, key string) <-chan string {
	t.Helper()
	sub := s.Client().Subscribe(context.Background(), namesFor(key).channel)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil { // confirmed
		t.Fatal(err)
	}
	got := make(chan string, 16)
	go func() {
		for m := range sub.Channel() {
			got <- m.Payload
		}
	}()
	return got
}

// The release of the last hold on a single server sends the unlock message ("0" on Redisson's channel), so
// waiters in other processes, Redisson's included, try at once rather than at the holder's lease (30 s);
// the release of a reentrant hold sends none.
func TestReleaseSendsTheUnlockMessage(t *testing.T) {
	s := redistest.Start(t)
	l, other := newLocker(t, s, Config{}), newLocker(t, s, Config{})
	ctx := context.Background()
	messages := listenForUnlock(t, s, "k")
	outer := mustAcquire(t, l, ctx, "k")
	inner := mustAcquire(t, l, outer.Context(), "k")
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-messages:
		t.Fatalf("unlock message %q after the release of a reentrant hold: the lock is still held", m)
	case <-time.After(100 * time.Millisecond):
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	got := make(chan time.Time, 1)
	go func() {
		if next, err := other.Acquire(wctx, "k"); err == nil {
			got <- time.Now()
			_ = next.Release(ctx)
		}
	}()
	waitSleeping(t, other.e, "k")
	released := time.Now()
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-messages:
		if m != "0" {
			t.Errorf("unlock message %q, want \"0\" (Redisson's LockPubSub)", m)
		}
	case <-time.After(time.Second):
		t.Fatal("no unlock message within 1 s of the last release")
	}
	select {
	case at := <-got:
		if wait := at.Sub(released); wait > wokenWithin {
			t.Errorf("the other process's waiter got the lock %v after the release, want <= %v", wait, wokenWithin)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other process's waiter was not woken by the release")
	}
}

// The release script itself refuses an owner that does not hold the lock (Lease.Release stops a non-owner
// before it runs, so only a direct call shows it): it answers -1 and changes nothing, neither the holds nor
// the lease, and sends no unlock message.
func TestReleaseScriptRefusesAnotherOwner(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l := newLocker(t, s, Config{})
	ctx := context.Background()
	lease := mustAcquire(t, l, ctx, "k")
	owner := OwnerFrom(lease.Context())
	if err := lease.Extend(ctx, time.Minute); err != nil { // a lease the release's 30 s would not shorten
		t.Fatal(err)
	}
	messages := listenForUnlock(t, s, "k")
	n := namesFor("k")
	for _, intruder := range []string{"another-owner", ""} {
		rep, err := parseRelease(releaseScript.Run(ctx, rdb, []string{n.lock, n.channel,
			n.latch("intruder-" + intruder)}, intruder, (30 * time.Second).Milliseconds(), latchTTL.Milliseconds(),
			"publish"))
		if err != nil || rep.left != -1 {
			t.Errorf("release by %q: %+v, %v; want -1 holds left (not held)", intruder, rep, err)
		}
	}
	if holds := rdb.HGetAll(ctx, n.lock).Val(); len(holds) != 1 || holds[owner] != "1" {
		t.Errorf("holds %v after releases by other owners, want %s's one", holds, owner)
	}
	if pttl := rdb.PTTL(ctx, n.lock).Val(); pttl < 59*time.Second {
		t.Errorf("lease %v after releases by other owners, want the minute it was extended to", pttl)
	}
	select {
	case m := <-messages:
		t.Errorf("unlock message %q after releases by other owners", m)
	case <-time.After(100 * time.Millisecond):
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("the owner's release after the others': %v", err)
	}
	if rdb.Exists(ctx, n.lock).Val() != 0 {
		t.Fatal("the owner's release left the lock")
	}
}

// The common cycle, a fresh acquisition and the release of its only hold, writes no latch: a key of its
// own with an expiry per request cost the uncontended lock a fifth of its Redis CPU (issue 45). It leaves
// nothing behind but the fencing counter, on every server of the lock.
func TestAnUncontendedCycleLeavesOnlyTheFencingCounter(t *testing.T) {
	_, cases := lockers(t, Config{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			for range 3 {
				lease := mustAcquire(t, c.locker, ctx, "k")
				if err := lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			settled(c.locker)
			for i, s := range c.servers {
				keys := s.Client().Keys(ctx, "*").Val()
				if len(keys) != 1 || keys[0] != namesFor("k").token {
					t.Errorf("server %d: keys %v after three cycles, want only the fencing counter %s", i, keys,
						namesFor("k").token)
				}
			}
		})
	}
}

// A release's first send that finds its hold gone reports it (ErrNotHeld), even when the server had lost
// its scripts: the EVALSHA that answered NOSCRIPT did not run, so the EVAL that follows is still the
// request's first send, not a resend, which would take the missing hold for freed by an earlier send.
func TestAReleaseAfterTheScriptsWereFlushedStillReportsALostHold(t *testing.T) {
	servers, cases := lockers(t, Config{})
	for _, c := range cases {
		for _, inPipeline := range []bool{false, true} {
			if inPipeline && c.name != "reentrant" {
				continue
			}
			t.Run(fmt.Sprintf("%s/pipeline=%v", c.name, inPipeline), func(t *testing.T) {
				ctx := context.Background()
				lease := mustAcquire(t, c.locker, ctx, "k")
				settled(c.locker)
				for _, s := range c.servers {
					rdb := s.Client()
					rdb.Del(ctx, namesFor("k").lock) // expired behind its holder's back
					rdb.ScriptFlush(ctx)
				}
				var err error
				if inPipeline {
					pipe := servers[0].Client().Pipeline()
					finish := ReleaseIn(ctx, pipe, lease)
					_, execErr := pipe.Exec(ctx)
					err = finish(execErr)
				} else {
					err = lease.Release(ctx)
				}
				if !errors.Is(err, ErrNotHeld) {
					t.Errorf("release of a hold gone, after a script flush: %v, want ErrNotHeld", err)
				}
			})
		}
	}
}

// A later send of a release and a copy of an earlier one can each reach Redis after the owner, its release
// returned, took the key again: over another connection, held up on the way. Neither may take that hold for
// the one it releases. A later send that finds the hold freed latches that for an earlier copy still out;
// one that comes after the first send freed the hold tells the owner's next hold by its newer token.
func TestALateCopyOfAReleaseSparesItsOwnersNextHold(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, later string // the sends in the order they reach Redis
	}{
		{"the later send first, then a copy of the first", "1", "0"},
		{"the first send, then a later one", "0", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client()
			be := singleNode{scripts: newScripts(Config{Lease: time.Minute}, false), rdb: rdb, run: direct{rdb}}
			ctx := context.Background()
			n := namesFor("k")
			acquire := func(id string) int64 {
				t.Helper()
				a, err := be.acquire(ctx, request{n: n, owner: "o", id: id})
				if err != nil || !a.ok {
					t.Fatalf("acquire: %+v %v", a, err)
				}
				return a.token
			}
			token := acquire("a-1")
			release := func(send string) releaseReply {
				t.Helper()
				rep, err := parseRelease(releaseScript.Run(ctx, rdb, []string{n.lock, n.channel, n.latch("req-1"),
					n.token}, "o", time.Minute.Milliseconds(), latchTTL.Milliseconds(), "publish", send, token))
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			if rep := release(tc.first); rep.left != 0 {
				t.Fatalf("the release that reached Redis first: %d holds left, want 0", rep.left)
			}
			acquire("a-2") // the owner's next hold
			if rep := release(tc.later); rep.left != 0 {
				t.Errorf("the release that reached Redis second: %d holds left, want 0 (freed by the first)", rep.left)
			}
			if holds, _ := rdb.HGet(ctx, n.lock, "o").Int(); holds != 1 {
				t.Errorf("%d holds of the owner after a late copy of its earlier release, want its next hold's 1", holds)
			}
		})
	}
}
