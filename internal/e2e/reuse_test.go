package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// An order id is one order's: a basket that reuses a decided basket's id with a line more, or a single-SKU
// order that reuses it on one of its SKUs, is poisoned ("used by another order") and changes nothing,
// while an order of the same SKU with an id of its own is decided (in a batch with it or not); the first
// basket's redelivery, its lines in another order, still replays.
func TestAReusedOrderIDIsPoisoned(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	for _, sku := range []string{"A", "B", "C"} {
		rdb.HSet(ctx, "stock:{"+sku+"}", "available", 10)
	}
	startWorker(t, s, "w0")
	add := func(payload string) {
		t.Helper()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", payload}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	add(`{"order_id":"o-1","lines":[{"sku":"A","quantity":1},{"sku":"B","quantity":1}]}`)
	waitFor(t, 10*time.Second, "o-1 is reserved", decided(rdb, "B", "o-1"))
	add(`{"order_id":"o-1","lines":[{"sku":"A","quantity":1},{"sku":"B","quantity":1},{"sku":"C","quantity":2}]}`)
	add(`{"order_id":"o-1","sku":"A","quantity":1}`)
	add(`{"order_id":"o-2","sku":"A","quantity":1}`)
	add(`{"order_id":"o-1","lines":[{"sku":"B","quantity":1},{"sku":"A","quantity":1}]}`)
	waitFor(t, 20*time.Second, "the two reuses are poisoned", func() bool { return rdb.XLen(ctx, "orders-poison").Val() == 2 })
	waitFor(t, 10*time.Second, "every other order has its outcome", func() bool { return rdb.XLen(ctx, "order-results").Val() == 3 })
	poison, _ := rdb.XRange(ctx, "orders-poison", "-", "+").Result()
	for _, e := range poison {
		if reason, _ := e.Values["poison_reason"].(string); !strings.Contains(reason, "order id was used by another order") {
			t.Errorf("poison reason %q, want it to say the order id was used by another order", reason)
		}
	}
	for sku, want := range map[string]string{"A": "8", "B": "9", "C": "10"} {
		if got := rdb.HGet(ctx, "stock:{"+sku+"}", "available").Val(); got != want {
			t.Errorf("%s available %s, want %s (o-1 once, o-2 on A)", sku, got, want)
		}
	}
	results, _ := rdb.XRange(ctx, "order-results", "-", "+").Result()
	replays := 0
	for _, e := range results {
		if p, _ := e.Values["payload"].(string); strings.Contains(p, `"order_id":"o-1"`) && strings.Contains(p, `"replayed":true`) {
			replays++
		}
	}
	if replays != 1 {
		t.Errorf("%d replayed outcomes of o-1, want 1 (its redelivery with the lines in another order)", replays)
	}
}
