package inventory_test

import (
	"context"
	"testing"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A round's basket whose lines were given unsorted and twice over is decided and reported on its merged
// lines, in the pipeline as alone: each line's outcome is the SKU's, with the SKU's quantity.
func TestARoundReportsABasketOnItsMergedLines(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10, "B": 10, "W": 10})
	round := func(id string) []inventory.BatchResult {
		return store.ReserveBatches(ctx, []inventory.Batch{
			{Ctx: ctx, Orders: batchOf("W", inventory.Order{ID: id + "-w", Quantity: 1})},
			{Ctx: ctx, Basket: &inventory.Basket{OrderID: id, Lines: []order.Line{{SKU: "B", Quantity: 2}, {SKU: "A", Quantity: 3}, {SKU: "B", Quantity: 1}}}},
		})
	}
	round("warm") // Redis learns the scripts: the next round is one pipeline
	r := round("o-1")[1]
	if r.Err != nil || len(r.Order.Lines) != 2 {
		t.Fatalf("basket: %+v, want 2 merged lines", r)
	}
	for i, want := range []struct {
		sku            string
		quantity, left int64
	}{{"A", 3, 4}, {"B", 3, 4}} {
		if l := r.Order.Lines[i]; l.SKU != want.sku || l.Quantity != want.quantity || l.AvailableAfter != want.left {
			t.Errorf("line %d: %s x%d, %d left; want %s x%d, %d left", i, l.SKU, l.Quantity, l.AvailableAfter, want.sku, want.quantity, want.left)
		}
	}
}

// On a Redis Cluster a basket's SKUs may live in different slots: a round decides it line by line (a saga),
// never as one script in the pipeline, which the cluster would refuse (CROSSSLOT).
func TestARoundOnAClusterReservesABasketLineByLine(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10, "B": 10, "C": 10})
	for _, id := range []string{"warm", "o-1"} {
		got := store.ReserveBatches(ctx, []inventory.Batch{
			{Ctx: ctx, Orders: batchOf("C", inventory.Order{ID: id + "-c", Quantity: 1})},
			{Ctx: ctx, Basket: &inventory.Basket{OrderID: id, Lines: lines("A", 1, "B", 1)}},
		})
		if r := got[1]; r.Err != nil || r.Order.Status != order.StatusReserved {
			t.Fatalf("basket %s on a cluster: %+v, want reserved", id, r)
		}
	}
}
