package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// partitioned is the stream layout of the partition tests.
func partitioned(n int, cluster bool) stream.Config {
	c := stream.DefaultConfig()
	c.OrdersPartitions, c.Cluster = n, cluster
	return c
}

// On one Redis with 4 partitions, two workers read every partition; an order a producer routed to the
// wrong partition is decided all the same, its outcome going to that partition's results stream.
func TestPartitionedStreamsOnOneRedis(t *testing.T) {
	s := redistest.Start(t)
	env := []string{"ORDERS_PARTITIONS=4"}
	startWorker(t, s, "p0", env...)
	startWorker(t, s, "p1", env...)
	sum := produceEnv(t, append([]string{"REDIS_URL=" + s.URL()}, env...),
		"--orders", "3000", "--skus", "20", "--seed-stock", "100")
	assertConsistent(t, sum)
	if sum.Reserved != 2000 || sum.Rejected != 1000 {
		t.Fatalf("reserved %d, rejected %d; want 2000 and 1000", sum.Reserved, sum.Rejected)
	}
	rdb, ctx := s.Client(), context.Background()
	layout := partitioned(4, false)
	for _, p := range layout.Partitions() {
		n := rdb.XLen(ctx, p.Orders).Val()
		if n == 0 {
			t.Errorf("%s is empty: 20 SKUs should spread over all 4 partitions", p.Orders)
		}
		waitFor(t, 10*time.Second, p.Orders+" has nothing pending", func() bool {
			return rdb.XPending(ctx, p.Orders, "inventory").Val().Count == 0
		})
	}
	if rdb.Exists(ctx, "orders", "order-results").Val() != 0 {
		t.Error("the unpartitioned streams exist: something used the names without a partition")
	}

	// SKU-W's partition is crc32 % 4; send its order to another.
	if err := rdb.HSet(ctx, "stock:{SKU-W}", "available", 5, "reserved", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wrong := layout.Partitions()[(layout.PartitionOf("SKU-W")+1)%4]
	payload := `{"order_id":"misrouted-1","sku":"SKU-W","quantity":2}`
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: wrong.Orders, Values: []string{"payload", payload}}).Err(); err != nil {
		t.Fatal(err)
	}
	r := awaitOutcome(t, rdb, wrong.Results, "misrouted-1")
	if r.Status != order.StatusReserved || rdb.HGet(ctx, "stock:{SKU-W}", "available").Val() != "3" {
		t.Fatalf("misrouted order: %+v, available %s; want reserved, 3 left", r, rdb.HGet(ctx, "stock:{SKU-W}", "available").Val())
	}

	// A worker with another number of partitions would leave streams unread: it refuses to start.
	odd := startWorker(t, s, "p8", "ORDERS_PARTITIONS=8")
	err, exited := odd.exited(10 * time.Second)
	if !exited || err == nil || !strings.Contains(odd.logText(), "laid out with 4") {
		t.Fatalf("worker with 8 partitions where 4 are recorded: exited %v (%v), log %s", exited, err, odd.logText())
	}
}

// awaitOutcome waits for the outcome event of order id on the results stream.
func awaitOutcome(t *testing.T, rdb redis.UniversalClient, results, id string) order.Result {
	t.Helper()
	var found *order.Result
	waitFor(t, 10*time.Second, fmt.Sprintf("an outcome of %s on %s", id, results), func() bool {
		for _, e := range rdb.XRange(context.Background(), results, "-", "+").Val() {
			var r order.Result
			if p, _ := e.Values["payload"].(string); json.Unmarshal([]byte(p), &r) == nil && r.OrderID == id {
				found = &r
				return true
			}
		}
		return false
	})
	return *found
}
