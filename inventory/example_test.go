package inventory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
)

// This example is compiled but not run: it needs a Redis server, and the tests start their own
// (testkit/redistest) rather than touch one that may hold real data. Against an empty Redis it prints
//
//	reserved 8
//	rejected insufficient_stock 8
//	reserved 8 replayed=true
func ExampleStore_Reserve() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	store := inventory.New(rdb)

	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		fmt.Println(err)
		return
	}
	// The fence is the lock's fencing token; a holder whose lease was lost gets ErrStaleFence.
	o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 2}, 7)
	if errors.Is(err, inventory.ErrStaleFence) {
		fmt.Println("lost the lock, not reserving")
		return
	}
	fmt.Println(o.Status, o.AvailableAfter)

	o, _ = store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 9}, 7)
	fmt.Println(o.Status, o.Reason, o.AvailableAfter)

	// A redelivered order gets its first outcome back and takes nothing more.
	o, _ = store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 2}, 7)
	fmt.Println(o.Status, o.AvailableAfter, "replayed="+fmt.Sprint(o.Replayed))
}

// Like ExampleStore_Reserve, compiled but not run. Against an empty Redis it prints
//
//	o-1 reserved 8 replayed=false
//	o-2 rejected 8 replayed=false
//	o-1 reserved 8 replayed=true
//	o-3 reserved 7 replayed=false
func ExampleStore_ReserveBatch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	store := inventory.New(rdb)

	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		fmt.Println(err)
		return
	}
	// One script call decides the orders as Reserve would one after the other: o-2 does not fit, the
	// repeated o-1 is a replay of the first, o-3 fits.
	outs, err := store.ReserveBatch(ctx, []inventory.Order{
		{ID: "o-1", SKU: "SKU-1", Quantity: 2}, {ID: "o-2", SKU: "SKU-1", Quantity: 9},
		{ID: "o-1", SKU: "SKU-1", Quantity: 2}, {ID: "o-3", SKU: "SKU-1", Quantity: 1},
	}, 7)
	if err != nil { // the whole batch failed and wrote nothing
		fmt.Println(err)
		return
	}
	for _, o := range outs {
		fmt.Println(o.OrderID, o.Status, o.AvailableAfter, "replayed="+fmt.Sprint(o.Replayed))
	}
}
