package delivery

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// Why the chain has retry and poison of its own rather than Watermill's Retry and PoisonQueue (the package
// doc, docs/architecture.md): each test runs Watermill's middleware and ours on the same delivered entry
// and shows what Watermill's gets wrong here.

// Watermill's Retry retries inside one delivery: a stock store that refuses an order for good
// (inventory.ErrCorrupt) runs MaxRetries+1 times and Redis counts one delivery, so MAX_ATTEMPTS, which
// counts Redis's deliveries (they survive a crash and every worker sees them), would let it run
// MaxAttempts x (MaxRetries+1) times, holding a place in flight through every backoff. Ours runs it once
// and hands the entry back to the group with the attempt counted.
func TestWatermillsRetryHidesAttemptsFromRedisAndOursCountsThem(t *testing.T) {
	e := newChainEnv(t)
	msg := e.deliver(t, 1)
	h := &stub{err: inventory.ErrCorrupt}
	retry := middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}
	if _, err := retry.Middleware(h.handle)(msg); !errors.Is(err, inventory.ErrCorrupt) || h.calls != 3 {
		t.Fatalf("Watermill's Retry: %d runs, err %v; want 3 runs and the store's error", h.calls, err)
	}
	if p := e.pending(t); len(p) != 1 || p[0].RetryCount != 1 {
		t.Fatalf("Watermill's Retry: pending %v; want the entry with the one delivery Redis counted", p)
	}

	e = newChainEnv(t)
	msg = e.deliver(t, 1)
	h = &stub{err: inventory.ErrCorrupt}
	if _, err := e.c.retry(h.handle)(msg); !errors.Is(err, ErrHandedBack) || h.calls != 1 {
		t.Fatalf("ours: %d runs, err %v; want 1 run, handed back", h.calls, err)
	}
	p := e.pending(t)
	if len(p) != 1 || p[0].Idle < e.c.claimIdle/2 || p[0].RetryCount != 1 {
		t.Fatalf("ours: pending %v; want the entry handed back (idle) with its delivery counted", p)
	}
}

// Watermill's PoisonQueue publishes the message (its UUID, metadata and payload) and returns nil, leaving the
// ack to the Router: the entry's own fields are lost (a plain producer's extra fields, what an operator
// replays from), and a crash between the two steps poisons the entry twice. Ours copies the entry's fields
// into the poison stream and acks the entry in one transaction.
func TestWatermillsPoisonQueueLosesTheEntrysFieldsAndOursKeepsThemAndAcks(t *testing.T) {
	e := newChainEnv(t)
	msg := e.deliver(t, 1)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: e.rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := middleware.PoisonQueueWithFilter(pub, "orders-poison", func(err error) bool { return errors.Is(err, order.ErrBadInput) })
	if err != nil {
		t.Fatal(err)
	}
	h := &stub{err: order.ErrBadInput}
	if _, err := pq(h.handle)(msg); err != nil {
		t.Fatalf("Watermill's PoisonQueue: %v", err)
	}
	poison := e.poisoned(t)
	if len(poison) != 1 || poison[0].Values["extra"] != nil || len(e.pending(t)) != 1 {
		t.Fatalf("Watermill's PoisonQueue: poison %v, pending %v; want the message without the entry's field extra, "+
			"and the entry still pending (acked later by the Router)", poison, e.pending(t))
	}

	e = newChainEnv(t)
	msg = e.deliver(t, 1)
	h = &stub{err: order.ErrBadInput}
	if _, err := e.c.poison(h.handle)(msg); err != nil {
		t.Fatalf("ours: %v", err)
	}
	poison = e.poisoned(t)
	if len(poison) != 1 || poison[0].Values["extra"] != "x" || len(e.pending(t)) != 0 {
		t.Fatalf("ours: poison %v, pending %v; want the entry's fields and the entry acked", poison, e.pending(t))
	}
}
