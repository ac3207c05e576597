package inventory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestReleaseGivesStockBackOnce(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 2); err != nil {
		t.Fatal(err)
	}

	o, err := store.Release(ctx, "o-1", "SKU-1", 3)
	w := inventory.Outcome{OrderID: "o-1", SKU: "SKU-1", Quantity: 3, Status: order.StatusReleased,
		AvailableAfter: 10, Fence: 3}
	if err != nil || o != w {
		t.Fatalf("release: %+v, %v; want %+v", o, err, w)
	}
	released := map[string]string{"available": "10", "reserved": "0", "fence": "3"}
	want(t, stockHash(t, rdb, "SKU-1"), released)
	if pttl, _ := rdb.PTTL(ctx, "order:{SKU-1}:o-1").Result(); pttl <= 0 {
		t.Fatalf("the released record lost its TTL: PTTL %v", pttl)
	}

	w.Replayed = true
	for _, call := range []struct {
		name string
		run  func() (inventory.Outcome, error)
	}{
		{"a second release", func() (inventory.Outcome, error) { return store.Release(ctx, "o-1", "SKU-1", 3) }},
		{"a redelivered reserve", func() (inventory.Outcome, error) {
			return store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 3)
		}},
	} {
		if o, err := call.run(); err != nil || o != w {
			t.Fatalf("%s: %+v, %v; want %+v", call.name, o, err, w)
		}
		want(t, stockHash(t, rdb, "SKU-1"), released)
	}
}

func TestReleaseOfAnOrderNotReservedWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 1); err != nil {
		t.Fatal(err)
	}
	if o, err := store.Reserve(ctx, inventory.Order{ID: "o-big", SKU: "SKU-1", Quantity: 5}, 0); err != nil || o.Status != order.StatusRejected {
		t.Fatalf("reserve: %+v, %v", o, err)
	}
	before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)
	record, _ := rdb.Get(ctx, "order:{SKU-1}:o-big").Result()

	for _, order := range []string{"o-big", "o-never"} {
		_, err := store.Release(ctx, order, "SKU-1", 9)
		if !errors.Is(err, inventory.ErrNotReserved) {
			t.Fatalf("release %s: got %v, want ErrNotReserved", order, err)
		}
		t.Log(err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), before)
	if n := dbsize(t, rdb); n != keys {
		t.Fatalf("DBSIZE = %d, want %d", n, keys)
	}
	if after, _ := rdb.Get(ctx, "order:{SKU-1}:o-big").Result(); after != record {
		t.Fatalf("record changed from %s to %s", record, after)
	}
}

func TestReleaseWithAStaleFenceWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 5); err != nil {
		t.Fatal(err)
	}
	before := stockHash(t, rdb, "SKU-1")
	record, _ := rdb.Get(ctx, "order:{SKU-1}:o-1").Result()

	if _, err := store.Release(ctx, "o-1", "SKU-1", 4); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("got %v, want ErrStaleFence", err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), before)
	if after, _ := rdb.Get(ctx, "order:{SKU-1}:o-1").Result(); after != record {
		t.Fatalf("record changed from %s to %s", record, after)
	}
}

func TestReleaseOfADeletedSKUWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 0); err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "stock:{SKU-1}")
	keys := dbsize(t, rdb) // the order record, and the stock count's latch

	if _, err := store.Release(ctx, "o-1", "SKU-1", 0); !errors.Is(err, stock.ErrUnknownSKU) {
		t.Fatalf("got %v, want stock.ErrUnknownSKU", err)
	}
	if n := dbsize(t, rdb); n != keys || rdb.Exists(ctx, "stock:{SKU-1}").Val() != 0 {
		t.Fatalf("DBSIZE = %d, want %d, and no stock hash created again", n, keys)
	}
}
