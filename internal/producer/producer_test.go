package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestRunPublishesEveryOrderOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rate      float64
		seed      int
		wantStock int64 // each SKU holds 4 before the run
	}{
		{"as fast as possible, from several goroutines, on seeded stock", 0, 7, 7},
		{"at a rate, on the stock as it was", 2000, -1, 4},
		{"on stock seeded to nothing", 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client()
			store := inventory.New(rdb)
			for _, sku := range []string{"SKU-0", "SKU-1", "SKU-2"} {
				if err := store.SetStock(context.Background(), sku, 4); err != nil {
					t.Fatal(err)
				}
			}
			cfg := DefaultConfig()
			cfg.RedisURL, cfg.Orders, cfg.SKUs, cfg.SeedStock, cfg.RunID, cfg.Rate = s.URL(), 40, 3, tc.seed, "t", tc.rate
			cfg.Force = true // the SKUs have stock
			start := time.Now()
			sum, err := Run(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if took, least := time.Since(start), time.Duration(39/tc.rate*float64(time.Second)); tc.rate > 0 && took < least {
				t.Errorf("40 orders at %v a second published in %v, want %v at least", tc.rate, took, least)
			}
			if sum.Published != 40 || sum.RunID != "t" || sum.Orders != 40 || len(sum.SKUs) != 3 {
				t.Errorf("summary %+v: want 40 of 40 orders of run t published over 3 SKUs", sum)
			}
			var ids []string
			for _, o := range publishedOrders(t, rdb, cfg.OrdersStream) {
				ids = append(ids, o.OrderID)
				if !slices.Contains([]string{"SKU-0", "SKU-1", "SKU-2"}, o.SKU) || o.Quantity != 1 || o.PlacedAt.IsZero() {
					t.Errorf("order %+v: want one of SKU-0..2, quantity 1, a placing time", o)
				}
			}
			slices.Sort(ids)
			want := make([]string, 40)
			for i := range want {
				want[i] = fmt.Sprint("t-", i+1)
			}
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				t.Errorf("published %v, want t-1 .. t-40 once each", ids)
			}
			groups, err := rdb.XInfoGroups(context.Background(), cfg.OrdersStream).Result()
			if err != nil || len(groups) != 1 || groups[0].Name != cfg.ConsumerGroup || groups[0].LastDeliveredID != "0-0" {
				t.Errorf("groups %+v (%v): want the workers' group, created before the first order", groups, err)
			}
			for _, sku := range []string{"SKU-0", "SKU-1", "SKU-2"} {
				st, err := store.Get(context.Background(), sku)
				if err != nil || st.Available != tc.wantStock || sum.SKUs[sku].Initial != tc.wantStock {
					t.Errorf("stock of %s %+v (%v), initial %d in the summary: want %d", sku, st, err, sum.SKUs[sku].Initial, tc.wantStock)
				}
			}
		})
	}
}

func publishedOrders(t *testing.T, rdb *redis.Client, name string) []order.Order {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), name, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	orders := make([]order.Order, len(entries))
	for i, e := range entries {
		payload, _ := e.Values["payload"].(string)
		if err := json.Unmarshal([]byte(payload), &orders[i]); err != nil {
			t.Fatalf("entry %v: %v", e, err)
		}
	}
	return orders
}

func TestRunWaitsForOutcomesAndChecksTheStock(t *testing.T) {
	for _, tc := range []struct {
		name         string
		answer       func(o order.Order) string // the status a fake worker answers, "" for none
		wantRejected int
		wantMissing  int
		wantProblems []string
	}{
		{
			name:         "every order rejected leaves the stock as it was: the check passes",
			answer:       func(order.Order) string { return "rejected" },
			wantRejected: 6,
		},
		{
			name: "an order said to be reserved without the stock moving fails the check",
			answer: func(o order.Order) string {
				if o.OrderID == "t-2" {
					return "reserved"
				}
				return "rejected"
			},
			wantRejected: 5,
			wantProblems: []string{"SKU-0: available fell by 0 but outcomes took 1", "SKU-0: reserved grew by 0 but outcomes reserved 1"},
		},
		{
			name: "orders without an outcome by the timeout are missing",
			answer: func(o order.Order) string {
				if slices.Contains([]string{"t-1", "t-2", "t-3"}, o.OrderID) {
					return "rejected"
				}
				return ""
			},
			wantRejected: 3,
			wantMissing:  3,
			wantProblems: []string{"3 events have no outcome"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := DefaultConfig()
			cfg.RedisURL, cfg.Orders, cfg.SKUList, cfg.SeedStock, cfg.RunID = s.URL(), 6, "SKU-0", 5, "t"
			cfg.Wait, cfg.Timeout = true, 2*time.Second
			// An outcome of an earlier run with the same id: not one of this run's.
			if err := rdb.XAdd(ctx, resultEntry(cfg.ResultsStream, order.Order{OrderID: "t-1", SKU: "SKU-0", Quantity: 1}, "reserved")).Err(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { defer close(done); fakeWorker(ctx, rdb, cfg, tc.answer) }()
			defer func() { cancel(); <-done }()

			sum, err := Run(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Rejected != tc.wantRejected || sum.Missing != tc.wantMissing || sum.Reserved != 6-tc.wantRejected-tc.wantMissing {
				t.Errorf("%d reserved, %d rejected, %d missing; want %d, %d, %d", sum.Reserved, sum.Rejected, sum.Missing,
					6-tc.wantRejected-tc.wantMissing, tc.wantRejected, tc.wantMissing)
			}
			if !slices.Equal(sum.Problems, tc.wantProblems) || sum.Consistent != (tc.wantProblems == nil) {
				t.Errorf("problems %q (consistent %v), want %q", sum.Problems, sum.Consistent, tc.wantProblems)
			}
			if k := sum.SKUs["SKU-0"]; k.Initial != 5 || k.Available != 5 || k.Reserved != 0 {
				t.Errorf("SKU-0 %+v: want the 5 seeded, all available", k)
			}
		})
	}
}

// fakeWorker answers each order of the orders stream with the outcome answer gives, without touching the stock.
func fakeWorker(ctx context.Context, rdb *redis.Client, cfg Config, answer func(order.Order) string) {
	for ctx.Err() == nil {
		streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: cfg.ConsumerGroup, Consumer: "fake",
			Streams: []string{cfg.OrdersStream, ">"}, Block: 100 * time.Millisecond}).Result()
		if err != nil { // no group yet, or nothing new
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, e := range streams[0].Messages {
			var o order.Order
			payload, _ := e.Values["payload"].(string)
			if json.Unmarshal([]byte(payload), &o) == nil && answer(o) != "" {
				_ = rdb.XAdd(ctx, resultEntry(cfg.ResultsStream, o, answer(o))).Err() // a missing outcome fails the test
			}
		}
	}
}

// resultEntry is the outcome event a worker would add for o.
func resultEntry(name string, o order.Order, status string) *redis.XAddArgs {
	payload, _ := json.Marshal(map[string]any{"order_id": o.OrderID, "sku": o.SKU, "quantity": o.Quantity,
		"status": status, "processed_at": time.Now().UTC()})
	return &redis.XAddArgs{Stream: name, Values: map[string]any{"payload": payload}}
}

// --seed-stock does not overwrite stock that exists: it names the SKUs that have some and writes and
// publishes nothing, unless --force. Without orders it only seeds.
func TestSeedingRefusesToOverwriteStockUnlessForced(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	for _, sku := range []string{"SKU-1", "SKU-3"} {
		if err := store.SetStock(ctx, sku, 4); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.RedisURL, cfg.Orders, cfg.SKUs, cfg.SeedStock, cfg.RunID = s.URL(), 10, 4, 50, "t"
	_, err := Run(ctx, cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "--seed-stock 50 would overwrite the stock of 2 SKU(s) that have some: SKU-1, SKU-3; give --force") {
		t.Fatalf("seeding over stock: %v, want a refusal naming SKU-1 and SKU-3 and --force", err)
	}
	if st, _ := store.Get(ctx, "SKU-1"); st.Available != 4 || rdb.Exists(ctx, stock.Key("SKU-0"), cfg.OrdersStream).Val() != 0 {
		t.Fatalf("the refused run wrote: SKU-1 %+v, or SKU-0's stock or orders exist", st)
	}

	cfg.Orders, cfg.Force = 0, true
	sum, err := Run(ctx, cfg, nil)
	if err != nil || sum.Seeded != 4 || sum.Published != 0 || !sum.Consistent {
		t.Fatalf("seeding only, forced: %+v, %v; want 4 SKUs seeded and nothing published", sum, err)
	}
	for _, sku := range []string{"SKU-0", "SKU-1", "SKU-2", "SKU-3"} {
		if st, err := store.Get(ctx, sku); err != nil || st.Available != 50 {
			t.Errorf("stock of %s after a forced seeding: %+v, %v; want 50", sku, st, err)
		}
	}
	if n := rdb.Exists(ctx, cfg.OrdersStream).Val(); n != 0 {
		t.Errorf("seeding only created the orders stream")
	}
}
