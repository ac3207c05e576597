package stockctl_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stockctl"
)

type pendingJSON struct {
	Stream string `json:"stream"`
	Group  struct {
		Name            string `json:"name"`
		Consumers       int64  `json:"consumers"`
		Pending         int64  `json:"pending"`
		Lag             *int64 `json:"lag"`
		LastDeliveredID string `json:"last_delivered_id"`
	} `json:"group"`
	Consumers []struct {
		Name    string `json:"name"`
		Pending int64  `json:"pending"`
		IdleMS  int64  `json:"idle_ms"`
	} `json:"consumers"`
	Entries []struct {
		ID         string `json:"id"`
		Consumer   string `json:"consumer"`
		IdleMS     int64  `json:"idle_ms"`
		Deliveries int64  `json:"deliveries"`
	} `json:"entries"`
}

// order adds a plain order entry to stream and returns its id.
func (e *env) order(stream, orderID string) string {
	e.t.Helper()
	payload := `{"order_id":"` + orderID + `","sku":"SKU-1","quantity":1}`
	return must(e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"payload", payload}}).Result())
}

// read reads up to n new entries of the orders stream as consumer, leaving them pending.
func (e *env) read(consumer string, n int64) []redis.XMessage {
	e.t.Helper()
	s := must(e.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: "inventory", Consumer: consumer,
		Streams: []string{"orders", ">"}, Count: n, Block: -1}).Result())
	return s[0].Messages
}

func TestPendingWhenStreamOrGroupIsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("pending")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stderr", r.stderr, `stream "orders" does not exist`)

	e.order("orders", "o-1")
	r = e.run("pending")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stderr", r.stderr, `consumer group "inventory" does not exist`)
}

func TestPendingShowsGroupConsumersAndDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	must(e.rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "0").Result())
	first, second := e.order("orders", "o-1"), e.order("orders", "o-2")
	e.order("orders", "o-3") // never read: the lag
	e.read("c1", 2)
	// c2 takes over the first entry: its second delivery.
	must(e.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "orders", Group: "inventory", Consumer: "c2", Messages: []string{first}}).Result())

	var got pendingJSON
	wantCode(t, e.runJSON(&got, "pending"), stockctl.ExitOK)
	g := got.Group
	if g.Name != "inventory" || g.Consumers != 2 || g.Pending != 2 || g.Lag == nil || *g.Lag != 1 || g.LastDeliveredID != second {
		t.Fatalf("group = %+v (lag %v), want 2 consumers, 2 pending, lag 1, last delivered %s", g, g.Lag, second)
	}
	if len(got.Consumers) != 2 || got.Consumers[0].Name != "c1" || got.Consumers[0].Pending != 1 ||
		got.Consumers[1].Name != "c2" || got.Consumers[1].Pending != 1 {
		t.Fatalf("consumers = %+v, want c1 and c2 with 1 pending each", got.Consumers)
	}
	want := map[string]struct {
		consumer   string
		deliveries int64
	}{first: {"c2", 2}, second: {"c1", 1}}
	if len(got.Entries) != 2 {
		t.Fatalf("entries = %+v, want 2", got.Entries)
	}
	for _, en := range got.Entries {
		if w := want[en.ID]; en.Consumer != w.consumer || en.Deliveries != w.deliveries {
			t.Errorf("entry %s: consumer %s, deliveries %d; want %s, %d", en.ID, en.Consumer, en.Deliveries, w.consumer, w.deliveries)
		}
	}

	wantCode(t, e.runJSON(&got, "pending", "--limit", "1"), stockctl.ExitOK)
	if len(got.Entries) != 1 || got.Entries[0].ID != first {
		t.Fatalf("--limit 1: entries %+v, want only the oldest %s", got.Entries, first)
	}
	r := e.run("pending")
	wantContains(t, "pending output", r.stdout, "group inventory: 2 consumers, 2 pending, lag 1", "c1", "c2", first, "DELIVERIES")
}

func TestPendingOfAnotherGroupAndStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	must(e.rdb.XGroupCreateMkStream(ctx, "orders-b", "billing", "0").Result())
	e.order("orders-b", "o-1")

	var got pendingJSON
	wantCode(t, e.runJSON(&got, "pending", "--orders-stream", "orders-b", "--consumer-group", "billing"), stockctl.ExitOK)
	if got.Stream != "orders-b" || got.Group.Name != "billing" || got.Group.Lag == nil || *got.Group.Lag != 1 {
		t.Fatalf("got %+v, want stream orders-b, group billing, lag 1", got)
	}
}
