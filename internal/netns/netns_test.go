package netns_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A server on a host answers across the link; a cut makes a command hang (no refusal, no reset) until its
// deadline; after the heal the same client works again.
func TestCutAndHeal(t *testing.T) {
	h := redistest.NewHost(t)
	s := redistest.Start(t, redistest.OnHost(h))
	rdb := s.Client()
	ping := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return rdb.Ping(ctx).Err()
	}
	if err := ping(time.Second); err != nil {
		t.Fatalf("ping %s before the cut: %v", s.Addr, err)
	}
	if err := h.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := ping(300 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) && !os.IsTimeout(err) {
		t.Fatalf("ping across a cut link: %v, want a timeout", err)
	}
	// A new connection too: the packets must be dropped, not routed elsewhere (off the machine).
	fresh := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer fresh.Close()
	if err := fresh.Ping(context.Background()).Err(); !os.IsTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a new connection across a cut link: %v, want a timeout", err)
	}
	if err := h.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := ping(2 * time.Second); err != nil {
		t.Fatalf("ping after the heal: %v", err)
	}
}

// Close removes the namespace and its link, also when called twice.
func TestCloseRemovesTheHost(t *testing.T) {
	h := redistest.NewHost(t)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + h.Name); !os.IsNotExist(err) {
		t.Fatalf("namespace %s still there after Close: %v", h.Name, err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
