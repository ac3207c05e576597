package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// An elided basket decides each line under a token above the SKU's stored fence even when the lock's
// counter is behind it (a fence raised by RaiseFence or a Redlock holder): a token at or below the fence
// would let the holder that wrote it write again after the basket.
func TestAnElidedBasketsTokenGoesPastTheStoredFence(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	if err := store.RaiseFence(ctx, "A", 9); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, rlock.TokenKey("A"), 3, 0) // the counter is behind the fence
	out, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1),
		inventory.Fences{"A": inventory.ElideLock, "B": inventory.ElideLock})
	if err != nil || out.Lines[0].Fence != 10 {
		t.Fatalf("elided basket: %+v, %v; want line A under token 10, past the stored fence 9", out, err)
	}
	if _, err := store.ReserveLines(ctx, "o-2", lines("A", 1), inventory.Fences{"A": 9}); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of token 9 writing after the elided basket: %v, want ErrStaleFence", err)
	}
}

// A basket whose token is below the lock's fencing counter (a newer holder has its token and has not
// written yet) is refused before any write, as a single order is.
func TestABasketBelowTheLocksCounterIsRefused(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithFenceCounter(rlock.TokenKey))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	rdb.Set(ctx, rlock.TokenKey("A"), 5, 0)
	rdb.Set(ctx, rlock.TokenKey("B"), 6, 0) // B's lock has a newer holder, token 6
	beforeA, beforeB, keys := stockHash(t, rdb, "A"), stockHash(t, rdb, "B"), dbsize(t, rdb)
	_, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), inventory.Fences{"A": 5, "B": 5})
	var stale *inventory.StaleFenceError
	if !errors.As(err, &stale) || !stale.Current || stale.Stored != 6 {
		t.Fatalf("basket with B's token 5 under counter 6: %v, want a StaleFenceError against the current token 6", err)
	}
	checkUntouched(t, rdb, "A", beforeA, keys)
	checkUntouched(t, rdb, "B", beforeB, keys)
}

// An order id reused by a basket of other SKUs finds a record that is another order's: the call fails with
// ErrOrderConflict and writes nothing, rather than finishing the first order's "partial" basket.
func TestABasketReusingAnotherOrdersIDIsAConflict(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10, "B": 10, "C": 10})
	if _, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), nil); err != nil {
		t.Fatal(err)
	}
	beforeC, keys := stockHash(t, rdb, "C"), dbsize(t, rdb)
	if _, err := store.ReserveLines(ctx, "o-1", lines("A", 2, "C", 2), nil); !errors.Is(err, inventory.ErrOrderConflict) {
		t.Fatalf("basket o-1 of A and C after o-1 of A and B: %v, want ErrOrderConflict", err)
	}
	checkUntouched(t, rdb, "C", beforeC, keys)

	// Every line's record another order's (two single orders o-2, one of A, one of B): not a replay of them.
	for _, sku := range []string{"A", "B"} {
		if _, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: sku, Quantity: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := store.ReserveLines(ctx, "o-2", lines("A", 3, "B", 3), nil); !errors.Is(err, inventory.ErrOrderConflict) {
		t.Fatalf("basket o-2 after single orders o-2 of A and of B: %+v, %v; want ErrOrderConflict, not their outcomes replayed", out, err)
	}
}

// A cancel or fulfil under a newer token raises the SKU's fence to it, as every fenced write does: the
// holder before it is refused from then on.
func TestACancelOrFulfilRaisesTheFence(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10})
	for i, op := range []func(context.Context, string, string, inventory.Fences) (inventory.OrderOutcome, error){store.Cancel, store.Fulfil} {
		order, reserveToken, newer := []string{"o-1", "o-2"}[i], int64(5+10*i), int64(7+10*i)
		if _, err := store.Reserve(ctx, inventory.Order{ID: order, SKU: "A", Quantity: 1}, reserveToken); err != nil {
			t.Fatal(err)
		}
		if _, err := op(ctx, order, "A", inventory.Fences{"A": newer}); err != nil {
			t.Fatal(err)
		}
		if st, err := store.Get(ctx, "A"); err != nil || st.Fence != newer {
			t.Fatalf("%s under token %d: stock %+v, %v; want the fence raised to %d", []string{"cancel", "fulfil"}[i], newer, st, err, newer)
		}
		if _, err := store.Reserve(ctx, inventory.Order{ID: order + "-late", SKU: "A", Quantity: 1}, newer-1); !errors.Is(err, inventory.ErrStaleFence) {
			t.Fatalf("token %d after a %s under %d: %v, want ErrStaleFence", newer-1, []string{"cancel", "fulfil"}[i], newer, err)
		}
	}
}
