package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
)

// A read whose reply is lost after Redis ran it (fetch.lua handed the entries to this consumer, go-redis
// resent the read on a new connection, and the resent read found nothing new) loses no entry: the entries
// stay pending for the consumer, and its claim round hands them over once they are idle, each once, as a
// second delivery.
func TestAReadWhoseReplyIsLostLosesNoEntry(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	lossy := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = lossy.Close() })
	for i := range 5 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	proxy.DropReplyTo("$4\r\nread\r\n", 1) // the first read of fetch.lua (a claim's mode is "claim")
	msgs := subscribe(t, newTestSubscriber(t, lossy, parts, func(c *SubscriberConfig) {
		c.ClaimIdle, c.ClaimInterval = 300*time.Millisecond, 20*time.Millisecond
	}))
	got := map[string]int{}
	for len(got) < 5 {
		msg := receive(t, msgs)
		got[string(msg.Payload)]++
		if d := Deliveries(msg); d != 2 {
			t.Errorf("entry %s (%s) delivered with %d deliveries, want 2: the lost read was the first", msg.UUID, msg.Payload, d)
		}
		done(t, rdb, msg)
	}
	if proxy.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Dropped())
	}
	select {
	case msg := <-msgs:
		t.Errorf("entry %s (%s) handed over again after every entry was acked", msg.UUID, msg.Payload)
	case <-time.After(500 * time.Millisecond):
	}
	if n := rdb.XPending(ctx, parts[0].Orders, "g").Val().Count; n != 0 {
		t.Errorf("%d entries still pending, want none", n)
	}
}
