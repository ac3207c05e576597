package lockmw

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redistest"
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
	ping := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
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
