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

func TestStockOperations(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)

	if _, err := store.Get(ctx, "SKU-1"); !errors.Is(err, stock.ErrUnknownSKU) {
		t.Fatalf("Get before stocking: got %v, want stock.ErrUnknownSKU", err)
	}
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "10", "reserved": "0"})
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 4}, 9); err != nil {
		t.Fatal(err)
	}

	// A stock count sets available only: reservations and the fence stay.
	if err := store.SetStock(ctx, "SKU-1", 20); err != nil {
		t.Fatal(err)
	}
	if got, err := store.Get(ctx, "SKU-1"); err != nil || got != (stock.Stock{Available: 20, Reserved: 4, Fence: 9}) {
		t.Fatalf("Get after SetStock: %+v, %v", got, err)
	}

	if n, err := store.Restock(ctx, "SKU-1", 5); err != nil || n != 25 {
		t.Fatalf("Restock: %d, %v; want 25", n, err)
	}
	if n, err := store.Restock(ctx, "SKU-2", 5); err != nil || n != 5 {
		t.Fatalf("Restock of a new SKU: %d, %v; want 5", n, err)
	}
	want(t, stockHash(t, rdb, "SKU-2"), map[string]string{"available": "5", "reserved": "0"})

	_, err := store.Restock(ctx, "SKU-1", stock.MaxStock)
	if !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("Restock past stock.MaxStock: got %v, want ErrInvalid", err)
	}
	t.Log(err)
	if got, _ := store.Get(ctx, "SKU-1"); got.Available != 25 {
		t.Fatalf("a refused Restock changed available to %d", got.Available)
	}
}

func TestCorruptStockIsRefusedBeforeAnyWrite(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	// A non-integer reserved would make the second HINCRBY fail after the first had run.
	rdb.HSet(ctx, "stock:{SKU-1}", "available", "10", "reserved", "1.5")

	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 3); err == nil {
		t.Fatal("reserve on a corrupt stock hash succeeded")
	} else {
		t.Log(err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "10", "reserved": "1.5"})
	if n := dbsize(t, rdb); n != 1 {
		t.Fatalf("DBSIZE = %d, want 1", n)
	}
}

// stock.Read reads what Get reads, with HMGET: a client that may not run scripts reads the same stock.
func TestStockReadReadsWhatGetReads(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	if _, err := stock.Read(ctx, rdb, "SKU-1"); !errors.Is(err, stock.ErrUnknownSKU) {
		t.Fatalf("stock.Read before stocking: got %v, want stock.ErrUnknownSKU", err)
	}
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 4}, 9); err != nil {
		t.Fatal(err)
	}
	got, err := stock.Read(ctx, rdb, "SKU-1")
	if want, _ := store.Get(ctx, "SKU-1"); err != nil || got != want || got != (stock.Stock{Available: 6, Reserved: 4, Fence: 9}) {
		t.Fatalf("stock.Read: %+v, %v; want what Get reads, %+v", got, err, want)
	}
	if _, err := stock.Read(ctx, rdb, "a b"); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("stock.Read of an invalid SKU: %v, want ErrInvalid", err)
	}
}
