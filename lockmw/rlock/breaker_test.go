package rlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// A master that does not answer is skipped until its cooldown is over, but only while the others make a
// majority; an answer closes its breaker again.
func TestBreakersSkipADeadMinorityOnly(t *testing.T) {
	servers := redistest.StartN(t, 3)
	b := newBreakers(3, 2)
	clock := time.Now()
	b.now = func() time.Time { return clock }
	var clients []*redis.Client
	for i, s := range servers {
		c := s.Client()
		c.AddHook(b.hook(i))
		clients = append(clients, c)
	}
	// The calls of an order's path: marked, each with its node timeout as the cause of its deadline.
	ping := func(i int) error {
		ctx, cancel := context.WithTimeoutCause(mayskip(context.Background()), 50*time.Millisecond, errNodeTimeout)
		defer cancel()
		return clients[i].Ping(ctx).Err()
	}

	servers[0].Pause()
	defer servers[0].Resume()
	if err := ping(0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused master: %v, want a timeout", err)
	}
	if err := ping(0); !errors.Is(err, ErrMasterSkipped) {
		t.Fatalf("paused master again within the cooldown: %v, want ErrMasterSkipped", err)
	}
	if err := ping(1); err != nil {
		t.Fatalf("a live master: %v", err)
	}
	// Renewals and undos are not marked: they still go to the paused master.
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errNodeTimeout)
	if err := clients[0].Ping(ctx).Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unmarked call to the skipped master: %v, want it sent (a timeout)", err)
	}
	cancel()

	servers[1].Pause()
	defer servers[1].Resume()
	if err := ping(1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second paused master: %v, want a timeout", err)
	}
	// Two of three failing: skipping either would give up the majority, so both are tried again.
	for _, i := range []int{0, 1} {
		if err := ping(i); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("master %d with two failing: %v, want it tried (a timeout), not skipped", i, err)
		}
	}

	servers[1].Resume()
	if err := ping(1); err != nil {
		t.Fatalf("resumed master: %v", err)
	}
	if err := ping(0); !errors.Is(err, ErrMasterSkipped) {
		t.Fatalf("paused master with the others answering again: %v, want ErrMasterSkipped", err)
	}
	servers[0].Resume()
	clock = clock.Add(MasterCooldown)
	if err := ping(0); err != nil {
		t.Fatalf("resumed master after its cooldown: %v, want it tried again", err)
	}
	if err := ping(0); err != nil {
		t.Fatalf("after an answer: %v", err)
	}
}

// A call its caller ended (its own deadline, not the node timeout) says nothing about the master.
func TestBreakersIgnoreCallsTheirCallerEnded(t *testing.T) {
	s := redistest.Start(t)
	b := newBreakers(3, 2)
	c := s.Client()
	c.AddHook(b.hook(0))
	s.Pause()
	defer s.Resume()
	ctx, cancel := context.WithTimeout(mayskip(context.Background()), 50*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx).Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused master: %v, want a timeout", err)
	}
	if b.until[0].Load() != 0 {
		t.Fatal("the caller's own deadline opened the master's breaker")
	}
}

// A Redlock call on a master that answered the call before it costs no allocation to order and record: it
// waits for that call without a timer, and its breaker notes the answer without a target on the heap. A
// 5-master cycle made 20 timers and 10 such allocations (issue 45).
func TestAMasterThatAnsweredCostsTheNextCallNoAllocation(t *testing.T) {
	before := newLane(3)
	close(before.done[1]) // master 1 answered the call before
	b := newBreakers(3, 2)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if err := before.wait(1, time.Second); err != nil {
			t.Fatal(err)
		}
		b.observe(ctx, 1, nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per call, want none", allocs)
	}
}
