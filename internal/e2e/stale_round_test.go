package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A worker stopped (SIGSTOP) between a round's stock scripts and its outcomes, past CLAIM_IDLE: another
// worker claims the order's entry and replays its outcome, then a cancel (or a fulfil) of the order is
// applied. When the stopped worker resumes, it publishes nothing for the order: every reservation event of
// the order has the same status, and the last event is the cancel's (or the fulfil's), the order's state.
func TestAStaleWorkerPublishesNothingAfterTheOrdersLaterEvents(t *testing.T) {
	for _, op := range []order.Type{order.TypeCancel, order.TypeFulfil} {
		t.Run(string(op), func(t *testing.T) {
			s := redistest.Start(t)
			ctx := context.Background()
			rdb := s.Client()
			if err := inventory.New(rdb).SetStock(ctx, "SKU-1", 10); err != nil {
				t.Fatal(err)
			}
			stale := startWorker(t, s, "stale", "FAULT_STOP_AFTER_ROUND=1")
			waitFor(t, 30*time.Second, "the worker is ready", func() bool { return rdb.Exists(ctx, "orders").Val() == 1 })
			add(t, rdb, `{"order_id":"o-1","sku":"SKU-1","quantity":1}`)
			waitFor(t, 10*time.Second, "the worker stopped after its round", stale.stopped)
			startWorker(t, s, "claimer")
			waitFor(t, 30*time.Second, "the claimer replays the order", func() bool { return len(orderEvents(t, rdb, "o-1")) == 1 })
			add(t, rdb, fmt.Sprintf(`{"type":%q,"order_id":"o-1","sku":"SKU-1"}`, op))
			waitFor(t, 30*time.Second, "the "+string(op)+" is applied", func() bool { return len(orderEvents(t, rdb, "o-1")) == 2 })

			stale.signal(syscall.SIGCONT)
			// The resumed worker's round ends by finding its entry claimed (it says so), or, before the fix,
			// by publishing its stale outcome; either way the events are checked after at most 30 s.
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if strings.Contains(strings.Join(stale.LogTail(100), "\n"), "outcome not published") ||
					len(orderEvents(t, rdb, "o-1")) > 2 {
					break
				}
			}
			events := orderEvents(t, rdb, "o-1")
			var statuses []order.Status
			for _, e := range events {
				statuses = append(statuses, e.Status)
				if e.Type == "" && e.Status != events[0].Status {
					t.Errorf("reservation events with different statuses: %v", statuses)
				}
			}
			if last := events[len(events)-1]; last.Type != op {
				t.Errorf("events of the order %v: the last is a %q event, want the %s's", statuses, cmpOr(last.Type, "reservation"), op)
			}
		})
	}
}

func add(t *testing.T, rdb *redis.Client, payload string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders", Values: []string{"payload", payload}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// orderEvents are the outcome events of order id, in stream order.
func orderEvents(t *testing.T, rdb *redis.Client, id string) []order.Result {
	t.Helper()
	var events []order.Result
	for _, x := range rdb.XRange(context.Background(), "order-results", "-", "+").Val() {
		var r order.Result
		if err := json.Unmarshal([]byte(x.Values["payload"].(string)), &r); err == nil && r.OrderID == id {
			events = append(events, r)
		}
	}
	return events
}

func cmpOr(t order.Type, alt string) string {
	if t == "" {
		return alt
	}
	return string(t)
}
