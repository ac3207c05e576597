package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// newOutcomes is the outcome publisher the worker gives Config.Outcomes, for consumer of group.
func newOutcomes(t testing.TB, rdb redis.UniversalClient, group, consumer string) message.Publisher {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: group, Consumer: consumer,
		DefaultMaxlen: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// A batch whose orders came from two partitions on different masters (a producer routed one elsewhere)
// publishes each outcome to its own partition's results stream and acks each entry in its own stream: on a
// cluster each partition's outcomes and ack are a MULTI of their own, since one MULTI cannot span slots.
func TestABatchOfTwoPartitionsIsPublishedPerPartitionOnACluster(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client()
	ctx := context.Background()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 5); err != nil {
		t.Fatal(err)
	}
	parts := order.Partitions(16, true, "orders", "results", "poison")
	h := New(Config{Store: store, Outcomes: newOutcomes(t, rdb, "g", "c"), ResultsTopic: "results", Worker: "w"})
	home := parts[order.PartitionOf("SKU-1", len(parts))]
	away := home
	for _, p := range parts {
		if c.MasterOf(p.Orders).Addr != c.MasterOf(home.Orders).Addr {
			away = p
			break
		}
	}
	for _, p := range []order.Partition{home, away} {
		if err := rdb.XGroupCreateMkStream(ctx, p.Orders, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", fmt.Sprintf("o-%d", p.Index)}})
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
		Partitions: len(parts), PoisonTopic: "poison", PoisonMaxLen: 100, NackLeavesPending: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var batch []*queued
	for range 2 {
		var msg *message.Message
		select {
		case msg = <-msgs:
		case <-time.After(10 * time.Second):
			t.Fatalf("read %d of the 2 entries within 10 s", len(batch))
		}
		o := order.Order{OrderID: string(msg.Payload), SKU: "SKU-1", Quantity: 1}
		batch = append(batch, &queued{msg: msg, order: o})
	}

	if _, err := h.committer.decide(&commit{ctx: ctx, batch: batch, fence: 0}); err != nil {
		t.Fatalf("decide a batch of two partitions on a cluster: %v", err)
	}
	for _, q := range batch { // as the router does once the handler returned
		q.msg.Ack()
	}
	if err := sub.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []order.Partition{home, away} {
		results := rdb.XRange(ctx, p.Results, "-", "+").Val()
		var r order.Result
		if len(results) == 1 {
			_ = json.Unmarshal([]byte(results[0].Values["payload"].(string)), &r)
		}
		if len(results) != 1 || r.OrderID != fmt.Sprintf("o-%d", p.Index) || r.Status != order.StatusReserved {
			t.Errorf("%s: %v, want the reserved outcome of o-%d alone", p.Results, results, p.Index)
		}
		if n := rdb.XPending(ctx, p.Orders, "g").Val().Count; n != 0 {
			t.Errorf("%s: %d entries pending after the outcomes were published, want 0 (acked)", p.Orders, n)
		}
	}
	if st, _ := store.Get(ctx, "SKU-1"); st.Available != 3 {
		t.Errorf("available %d after two orders of 1, want 3", st.Available)
	}
}
