package handlers

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// earlierHandler is a Handler with just what earlierPending reads: one partition, "orders", group g, its
// Redis, a claim idle time of 30 s.
func earlierHandler(t *testing.T, store Store) (*Handler, *redis.Client) {
	rdb := redistest.Start(t).Client()
	parts := order.Partitions(1, false, "orders", "results", "poison")
	if err := rdb.XGroupCreateMkStream(context.Background(), parts[0].Orders, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	return New(Config{Store: store, Redis: rdb, Partitions: parts, Group: "g", ClaimIdle: 30 * time.Second}), rdb
}

// pend adds an entry with id (or "*") and reads it as consumer c, so that it is pending; it returns its id.
func pend(t *testing.T, rdb *redis.Client, id string) string {
	ctx := context.Background()
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: id, Values: []string{"payload", "p"}}).Result()
	if err == nil {
		err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}}).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A cancel's or fulfil's own entry, pending while it is handled, is not an earlier one; an entry before it is.
func TestAnEventsOwnEntryIsNotAnEarlierPendingOne(t *testing.T) {
	w, rdb := earlierHandler(t, nil)
	first := pend(t, rdb, "*")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(first)); err != nil || earlier {
		t.Fatalf("the only pending entry, the event's own: earlier %v, %v; want false", earlier, err)
	}
	second := pend(t, rdb, "*")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(second)); err != nil || !earlier {
		t.Fatalf("an entry before the event's pending: earlier %v, %v; want true", earlier, err)
	}
}

// An event published more than twice CLAIM_IDLE ago waits for no earlier entry, pending or not: one that
// stays pending that long (failing again and again) no longer holds the event back.
func TestAnEventOlderThanTwiceClaimIdleWaitsForNoEarlierEntry(t *testing.T) {
	w, rdb := earlierHandler(t, nil)
	pend(t, rdb, "1000-0")
	old := pend(t, rdb, "2000-0") // published in 1970
	if earlier, err := w.earlierPending(context.Background(), entryMessage(old)); err != nil || earlier {
		t.Fatalf("an event published long before twice CLAIM_IDLE ago: earlier %v, %v; want false", earlier, err)
	}
}

// An event whose id a producer set in the future (the year 2100; every later entry of the partition then gets
// an id in 2100 too) waits for no earlier entry either: its id cannot say when it was published, and the
// bound of twice CLAIM_IDLE on an event's wait must hold.
func TestAnEventWithAFutureIDWaitsForNoEarlierEntry(t *testing.T) {
	w, rdb := earlierHandler(t, nil)
	pend(t, rdb, "4102444800000-0")
	event := pend(t, rdb, "*")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(event)); err != nil || earlier {
		t.Fatalf("an event with id %s: earlier %v, %v; want false", event, earlier, err)
	}
}

// entryMessage is the message of entry id as the subscriber hands it over.
func entryMessage(id string) *message.Message {
	return redisstream.Entry{ID: id, Values: map[string]any{"payload": "p"}}.Message()
}
