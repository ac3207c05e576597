package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Events of one order are decided in their stream order, across consumers and workers: 600 orders (half of
// them two-line baskets), each followed at once in the stream by its fulfil, through 2 workers x 16
// consumers. A fulfil read while its order's reservation is still being decided by another consumer waits
// for it (it is retried while an earlier entry of its partition is pending), so every order is fulfilled
// and none is refused as unknown.
func TestAFulfilRightAfterItsOrderFindsIt(t *testing.T) {
	s := redistest.Start(t)
	rdb, ctx := s.Client(), context.Background()
	for i := range 2 {
		startWorker(t, s, fmt.Sprintf("w%d", i), "WORKER_CONCURRENCY=16")
	}
	for i := range 10 {
		rdb.HSet(ctx, fmt.Sprintf("stock:{S%d}", i), "available", 1000, "reserved", 0)
	}
	const orders = 600
	pipe := rdb.Pipeline()
	for i := range orders {
		order := fmt.Sprintf(`{"order_id":"o-%d","sku":"S%d","quantity":1}`, i, i%10)
		if i%2 == 1 {
			order = fmt.Sprintf(`{"order_id":"o-%d","lines":[{"sku":"S%d","quantity":1},{"sku":"S%d","quantity":1}]}`, i, i%10, (i+1)%10)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", order}})
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload",
			fmt.Sprintf(`{"type":"fulfil","order_id":"o-%d","sku":"S%d"}`, i, i%10)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "an outcome for every order and fulfil", func() bool {
		return fulfilOutcomes(t, rdb).decided >= orders
	})
	got := fulfilOutcomes(t, rdb)
	t.Logf("fulfils: %d fulfilled, refused by reason %v", got.fulfilled, got.refused)
	if got.fulfilled != orders || len(got.refused) != 0 {
		t.Fatalf("%d of %d orders fulfilled, fulfils refused by reason %v: want every order fulfilled", got.fulfilled, orders, got.refused)
	}
}

type fulfils struct {
	decided, fulfilled int
	refused            map[string]int
}

// fulfilOutcomes counts the distinct fulfil events decided so far, and how.
func fulfilOutcomes(t *testing.T, rdb *redis.Client) fulfils {
	t.Helper()
	f := fulfils{refused: map[string]int{}}
	seen := map[string]bool{}
	for _, m := range rdb.XRange(context.Background(), "order-results", "-", "+").Val() {
		var r order.Result
		if err := json.Unmarshal([]byte(m.Values["payload"].(string)), &r); err != nil {
			t.Fatal(err)
		}
		if r.Type != order.TypeFulfil || seen[r.OrderID] {
			continue
		}
		seen[r.OrderID] = true
		f.decided++
		if r.Status == "fulfilled" {
			f.fulfilled++
		} else {
			f.refused[string(r.Reason)]++
		}
	}
	return f
}
