package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/testing/redistest"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

// With ElideLock a batch takes the SKU's lock inside its script: a free lock gives it the counter's next
// token (past the stored fence if the counter fell behind), which it decides and records under; a held
// lock fails it with ErrLocked before any write; a token from before the elided batch is then stale.
func TestReserveBatchElidesAFreeLock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	if err := store.SetStock(ctx, "P", 10); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, rlock.TokenKey("P"), 6, 0) // the lock's last holder had token 6
	orders := batchOf("P", inventory.Order{ID: "o-1", Quantity: 2}, inventory.Order{ID: "o-2", Quantity: 3})

	outs, err := store.ReserveBatch(ctx, orders, inventory.ElideLock)
	if err != nil || outs[0].Fence != 7 || outs[1].Fence != 7 || outs[1].AvailableAfter != 5 {
		t.Fatalf("elided batch: %+v, %v; want both reserved under token 7, 5 left", outs, err)
	}
	want(t, stock(t, rdb, "P"), map[string]string{"available": "5", "reserved": "5", "fence": "7"})
	if ttl := rdb.PTTL(ctx, rlock.TokenKey("P")).Val(); ttl < 59*time.Minute {
		t.Fatalf("fencing counter TTL %v, want the hour an acquisition gives it", ttl)
	}
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-3", Quantity: 1}), 6); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of token 6 writing after the elided batch: %v, want ErrStaleFence", err)
	}

	// A holder (Redisson's layout: a hash of owner -> count) has the lock: nothing is written.
	rdb.HSet(ctx, rlock.LockKey("P"), "someone:1", 1)
	before, keys := stock(t, rdb, "P"), dbsize(t, rdb)
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-4", Quantity: 1}), inventory.ElideLock); !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("lock held: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "P", before, keys)
	if got := rdb.Get(ctx, rlock.TokenKey("P")).Val(); got != "7" {
		t.Fatalf("fencing counter %s after a refused elision, want 7 (untouched)", got)
	}
	rdb.Del(ctx, rlock.LockKey("P"))

	// The counter fell behind the stored fence (it expired): the token goes past the fence.
	rdb.Del(ctx, rlock.TokenKey("P"))
	outs, err = store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-5", Quantity: 1}), inventory.ElideLock)
	if err != nil || outs[0].Fence != 8 {
		t.Fatalf("counter behind the fence 7: %+v, %v; want token 8", outs, err)
	}
	if got := rdb.Get(ctx, rlock.TokenKey("P")).Val(); got != "8" {
		t.Fatalf("fencing counter %s, want 8: the next acquisition must get a token past 8", got)
	}

	// A replayed batch draws no token.
	if outs, err := store.ReserveBatch(ctx, orders, inventory.ElideLock); err != nil || !outs[0].Replayed || outs[0].Fence != 7 {
		t.Fatalf("replay: %+v, %v; want the first outcome (token 7) replayed", outs, err)
	}
	if got := rdb.Get(ctx, rlock.TokenKey("P")).Val(); got != "8" {
		t.Fatalf("fencing counter %s after a replay, want 8", got)
	}
}

// ElideLock needs the store to know the lock: without WithLockElision it is an invalid fence.
func TestElideLockNeedsWithLockElision(t *testing.T) {
	store := inventory.New(redistest.Start(t).Client(), inventory.WithFenceCounter(rlock.TokenKey))
	_, err := store.ReserveBatch(context.Background(), batchOf("P", inventory.Order{ID: "o-1", Quantity: 1}), inventory.ElideLock)
	if !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}
