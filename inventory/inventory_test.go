package inventory_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// stockHash reads the stock hash directly, so tests check the key layout other clients rely on.

func stockHash(t *testing.T, rdb *redis.Client, sku string) map[string]string {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), "stock:{"+sku+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func want(t *testing.T, got, want map[string]string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stock hash = %v, want %v", got, want)
	}
}

func dbsize(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOutcomeRecordLayoutAndTTL(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	for _, tc := range []struct {
		name string
		opts []inventory.Option
		ttl  int64 // milliseconds
	}{
		{"the default keeps outcomes for 7 days", nil, inventory.DefaultOutcomeTTL.Milliseconds()},
		{"a minute-long TTL is honoured", []inventory.Option{inventory.WithOutcomeTTL(time.Minute)}, 60_000},
		{"a zero TTL keeps the default", []inventory.Option{inventory.WithOutcomeTTL(0)}, inventory.DefaultOutcomeTTL.Milliseconds()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := inventory.New(rdb, tc.opts...)
			if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Reserve(ctx, inventory.Order{ID: "o:1", SKU: "SKU-1", Quantity: 3}, 4); err != nil {
				t.Fatal(err)
			}
			key := "order:{SKU-1}:o:1"
			pttl, err := rdb.PTTL(ctx, key).Result()
			if err != nil || pttl.Milliseconds() <= tc.ttl-10_000 || pttl.Milliseconds() > tc.ttl {
				t.Fatalf("PTTL %s = %v, %v; want just under %dms", key, pttl, err, tc.ttl)
			}
			raw, err := rdb.GetDel(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(raw), &rec); err != nil {
				t.Fatalf("record %s is not JSON: %v", raw, err)
			}
			w := map[string]any{"status": "reserved", "reason": "", "quantity": 3.0, "available_after": 7.0, "fence": 4.0}
			if fmt.Sprint(rec) != fmt.Sprint(w) {
				t.Fatalf("record = %v, want %v", rec, w)
			}
		})
	}
}

func TestOutcomeJSONUsesTheEventFieldNames(t *testing.T) {
	b, err := json.Marshal(inventory.Outcome{OrderID: "o-1", SKU: "S", Quantity: 2, Status: order.StatusRejected,
		Reason: order.ReasonInsufficientStock, AvailableAfter: 1, Fence: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := `{"order_id":"o-1","sku":"S","quantity":2,"status":"rejected","reason":"insufficient_stock",` +
		`"available_after":1,"fence":3,"replayed":false}`
	if string(b) != w {
		t.Fatalf("got %s, want %s", b, w)
	}
}

func TestScriptsSurviveScriptFlushAndRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.WithPersistence())
	rdb := s.Client()
	store := inventory.New(rdb)
	shared, err := os.ReadFile("shared.lua") // the prelude of the stock scripts
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("reserve.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(append(shared, src...))
	sha := hex.EncodeToString(sum[:])
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 0); err != nil {
		t.Fatal(err)
	}

	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if o, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 0); err != nil || o.AvailableAfter != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", o, err)
	}
	// The fallback EVAL cached the script again, so later calls are EVALSHA hits.
	if exists, err := rdb.ScriptExists(ctx, sha).Result(); err != nil || !exists[0] {
		t.Fatalf("SCRIPT EXISTS reserve.lua = %v, %v after the fallback", exists, err)
	}

	s.Restart()
	if o, err := store.Reserve(ctx, inventory.Order{ID: "o-3", SKU: "SKU-1", Quantity: 1}, 0); err != nil || o.AvailableAfter != 7 {
		t.Fatalf("after restart: %+v, %v", o, err)
	}
	if o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 0); err != nil || !o.Replayed || o.AvailableAfter != 9 {
		t.Fatalf("replay after restart: %+v, %v", o, err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "7", "reserved": "3"})
}
