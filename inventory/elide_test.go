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

// A basket elides too, on one Redis: with ElideLock on every line its script takes all the lines' locks
// when none is held, each line under its counter's next token; one held lock fails it with ErrLocked before
// any write; a saga begun, or ElideLock on some lines only, is not elided.
func TestReserveLinesElidesFreeLocks(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	rdb.Set(ctx, rlock.TokenKey("B"), 4, 0) // B's lock was held before, with token 4
	elide := inventory.Fences{"A": inventory.ElideLock, "B": inventory.ElideLock}

	out, err := store.ReserveLines(ctx, "o-1", lines("A", 2, "B", 3), elide)
	if err != nil || out.Status != inventory.StatusReserved || out.Lines[0].Fence != 1 || out.Lines[1].Fence != 5 {
		t.Fatalf("elided basket: %+v, %v; want reserved, A under token 1, B under 5", out, err)
	}
	want(t, stock(t, rdb, "A"), map[string]string{"available": "8", "reserved": "2", "fence": "1"})
	want(t, stock(t, rdb, "B"), map[string]string{"available": "7", "reserved": "3", "fence": "5"})
	if ttl := rdb.PTTL(ctx, rlock.TokenKey("A")).Val(); ttl < 59*time.Minute {
		t.Fatalf("fencing counter TTL %v, want the hour an acquisition gives it", ttl)
	}
	if _, err := store.ReserveLines(ctx, "o-2", lines("B", 1), inventory.Fences{"B": 4}); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of B's token 4 writing after the elided basket: %v, want ErrStaleFence", err)
	}

	// B's lock is held: nothing is written, no token drawn.
	rdb.HSet(ctx, rlock.LockKey("B"), "someone:1", 1)
	beforeA, beforeB, keys := stock(t, rdb, "A"), stock(t, rdb, "B"), dbsize(t, rdb)
	if _, err := store.ReserveLines(ctx, "o-3", lines("A", 1, "B", 1), elide); !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("B's lock held: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "A", beforeA, keys)
	checkUntouched(t, rdb, "B", beforeB, keys)
	if a, b := rdb.Get(ctx, rlock.TokenKey("A")).Val(), rdb.Get(ctx, rlock.TokenKey("B")).Val(); a != "1" || b != "5" {
		t.Fatalf("fencing counters A %s B %s after a refused elision, want 1 and 5 (untouched)", a, b)
	}
	rdb.Del(ctx, rlock.LockKey("B"))

	// A replay draws no token and gives the first outcome.
	out, err = store.ReserveLines(ctx, "o-1", lines("A", 2, "B", 3), elide)
	if err != nil || !out.Lines[0].Replayed || out.Lines[1].Fence != 5 {
		t.Fatalf("replay: %+v, %v; want the first outcome replayed", out, err)
	}
	if got := rdb.Get(ctx, rlock.TokenKey("B")).Val(); got != "5" {
		t.Fatalf("fencing counter %s after a replay, want 5", got)
	}

	// A rejected basket is decided under its tokens too.
	out, err = store.ReserveLines(ctx, "o-4", lines("A", 1, "B", 50), elide)
	if err != nil || out.Status != inventory.StatusRejected || out.Lines[0].Fence != 2 || out.Lines[1].Fence != 6 {
		t.Fatalf("short basket: %+v, %v; want rejected under tokens 2 and 6", out, err)
	}

	// ElideLock on some lines only is invalid; a lifecycle call never elides.
	if _, err := store.ReserveLines(ctx, "o-5", lines("A", 1, "B", 1), inventory.Fences{"A": inventory.ElideLock, "B": 6}); !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("ElideLock on one line of two: %v, want ErrInvalid", err)
	}
	if _, err := store.Cancel(ctx, "o-1", "A", elide); !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("an elided cancel: %v, want ErrInvalid", err)
	}
}

// A basket that a saga began line by line (a crash between its lines on a cluster, say) is finished under
// its locks: elided, it fails with ErrLocked and writes nothing.
func TestAnElidedBasketBegunLineByLineTakesItsLocks(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	// The first line's record as the saga writes it (its stock left as it was: only the records count here).
	rdb.Set(ctx, "order:{A}:o-2", `{"status":"reserved","reason":"","quantity":1,"available_after":9,"fence":0,"lines":[{"sku":"A","quantity":1},{"sku":"B","quantity":1}]}`, time.Hour)
	beforeB, keys := stock(t, rdb, "B"), dbsize(t, rdb)
	_, err := store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1), inventory.Fences{"A": inventory.ElideLock, "B": inventory.ElideLock})
	if !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("elided basket begun line by line: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "B", beforeB, keys)
	out, err := store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1), inventory.Fences{"A": 7, "B": 7})
	if err != nil || out.Status != inventory.StatusReserved || !out.Lines[0].Replayed || out.Lines[1].Replayed {
		t.Fatalf("under its locks: %+v, %v; want the first line replayed, the second reserved", out, err)
	}
}
