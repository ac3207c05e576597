package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Two workers on one hot SKU take turns with its lock: each process passes the lock among its own orders
// for at most rlock.DefaultHandOffHold (its orders decided in batches meanwhile), then frees it in Redis
// and lets the other process's waiting leader take it first. Each worker decides between 30 % and 70 % of
// the orders, and no order waits longer than that bound plus 100 ms for the lock.
func TestHotSKUIsSharedFairlyBetweenWorkers(t *testing.T) {
	s := redistest.Start(t)
	startWorker(t, s, "w0")
	startWorker(t, s, "w1")
	const orders = 10000
	sum := produce(t, s, "--orders", "10000", "--sku-list", "HOT", "--seed-stock", "10000")
	assertConsistent(t, sum)
	decided := map[string]int{}
	var longest float64
	for _, m := range s.Client().XRange(context.Background(), "order-results", "-", "+").Val() {
		var r order.Result
		if err := json.Unmarshal([]byte(m.Values["payload"].(string)), &r); err != nil {
			t.Fatal(err)
		}
		decided[r.Worker]++
		longest = max(longest, r.LockWaitMs)
	}
	bound := float64((rlock.DefaultHandOffHold + 100*time.Millisecond).Milliseconds())
	t.Logf("decided by w0 %d, by w1 %d; longest lock wait %.1f ms (bound %.0f ms); p99 %.1f ms; %.0f orders/s",
		decided["w0"], decided["w1"], longest, bound, sum.LockWait.P99, sum.Throughput)
	for _, w := range []string{"w0", "w1"} {
		if share := float64(decided[w]) / orders; share < 0.3 || share > 0.7 {
			t.Errorf("%s decided %d of %d orders (%.0f %%), want 30-70 %%", w, decided[w], orders, 100*share)
		}
	}
	if longest > bound {
		t.Errorf("an order waited %.1f ms for the lock, want at most %.0f ms", longest, bound)
	}
}
