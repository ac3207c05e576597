package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// With ElideLock a batch takes the SKU's lock inside its script: a free lock lets it decide under a token
// above every token that wrote and every token the counter issued, the fence raised to it (a fence an
// elided batch raised, with no acquisition since, is kept), the counter written only when there is none; a
// held lock fails it with ErrLocked before any write; a token from before the elided batch is then stale,
// the next acquisition's is not; with the counter lost, the batch goes past the fence.
func TestReserveBatchElidesAFreeLock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	if err := store.SetStock(ctx, "P", 10); err != nil {
		t.Fatal(err)
	}
	counter := func(want string) {
		t.Helper()
		if got := rdb.Get(ctx, rlock.TokenKey("P")).Val(); got != want {
			t.Fatalf("fencing counter %q, want %q: an elided batch writes it only when there is none", got, want)
		}
	}
	elided := func(id string, wantToken int64) {
		t.Helper()
		outs, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: id, Quantity: 1}), inventory.ElideLock)
		if err != nil || outs[0].Fence != wantToken {
			t.Fatalf("elided batch %s: %+v, %v; want decided under token %d", id, outs, err, wantToken)
		}
		want(t, map[string]string{"fence": stockHash(t, rdb, "P")["fence"]}, map[string]string{"fence": strconv.FormatInt(wantToken, 10)})
	}
	rdb.Set(ctx, rlock.TokenKey("P"), 6, 0) // the lock's last holder had token 6
	orders := batchOf("P", inventory.Order{ID: "o-1", Quantity: 2}, inventory.Order{ID: "o-2", Quantity: 3})

	outs, err := store.ReserveBatch(ctx, orders, inventory.ElideLock)
	if err != nil || outs[0].Fence != 7 || outs[1].Fence != 7 || outs[1].AvailableAfter != 5 {
		t.Fatalf("elided batch: %+v, %v; want both reserved under token 7, 5 left", outs, err)
	}
	want(t, stockHash(t, rdb, "P"), map[string]string{"available": "5", "reserved": "5", "fence": "7", "elided": "7:6"})
	counter("6")
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-3", Quantity: 1}), 6); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of token 6 writing after the elided batch: %v, want ErrStaleFence", err)
	}
	elided("o-4", 7) // the fence is above the counter already: kept

	// The next acquisition draws 7, which the fence takes; after it, an elided batch goes above 7 again.
	rdb.Incr(ctx, rlock.TokenKey("P"))
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-5", Quantity: 1}), 7); err != nil {
		t.Fatalf("the next acquisition's token 7 after elided batches under 7: %v, want accepted", err)
	}
	elided("o-6", 8)
	counter("7")

	// A holder (Redisson's layout: a hash of owner -> count) has the lock: nothing is written.
	rdb.HSet(ctx, rlock.LockKey("P"), "someone:1", 1)
	before, keys := stockHash(t, rdb, "P"), dbsize(t, rdb)
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-7", Quantity: 1}), inventory.ElideLock); !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("lock held: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "P", before, keys)
	counter("7")
	rdb.Del(ctx, rlock.LockKey("P"))

	// The counter is lost (expired, deleted) after a holder wrote (token 8): the batch goes past the fence,
	// so that the holder is refused, and creates the counter at its token's - 1 (the next acquisition draws
	// the fence, with the TTL an acquisition gives it); the next batch keeps the fence.
	rdb.Set(ctx, rlock.TokenKey("P"), 8, 0)
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-8", Quantity: 1}), 8); err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, rlock.TokenKey("P"))
	elided("o-9", 9)
	if _, err := store.ReserveBatch(ctx, batchOf("P", inventory.Order{ID: "o-10", Quantity: 1}), 8); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of token 8 writing after the counter was lost and a batch elided: %v, want ErrStaleFence", err)
	}
	elided("o-11", 9)
	counter("8")
	if ttl := rdb.PTTL(ctx, rlock.TokenKey("P")).Val(); ttl < 59*time.Minute {
		t.Fatalf("created fencing counter TTL %v, want the hour an acquisition gives it", ttl)
	}

	// A replayed batch draws no token.
	if outs, err := store.ReserveBatch(ctx, orders, inventory.ElideLock); err != nil || !outs[0].Replayed || outs[0].Fence != 7 {
		t.Fatalf("replay: %+v, %v; want the first outcome (token 7) replayed", outs, err)
	}
	counter("8")
}

// ElideLock needs the store to know the lock: without WithLockElision it is an invalid fence.
func TestElideLockNeedsWithLockElision(t *testing.T) {
	store := inventory.New(redistest.Start(t).Client(), inventory.WithFenceCounter(rlock.TokenKey))
	_, err := store.ReserveBatch(context.Background(), batchOf("P", inventory.Order{ID: "o-1", Quantity: 1}), inventory.ElideLock)
	if !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

// A basket elides too, on one Redis: with ElideLock on every line its script takes all the lines' locks
// when none is held, each line under a token above its counter's (reserve_batch.lua's elided); one held lock fails it with ErrLocked before
// any write; a saga begun, or ElideLock on some lines only, is not elided.
func TestReserveLinesElidesFreeLocks(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	rdb.Set(ctx, rlock.TokenKey("B"), 4, 0) // B's lock was held before, with token 4
	elide := inventory.Fences{"A": inventory.ElideLock, "B": inventory.ElideLock}

	out, err := store.ReserveLines(ctx, "o-1", lines("A", 2, "B", 3), elide)
	if err != nil || out.Status != order.StatusReserved || out.Lines[0].Fence != 1 || out.Lines[1].Fence != 5 {
		t.Fatalf("elided basket: %+v, %v; want reserved, A under token 1, B under 5", out, err)
	}
	want(t, stockHash(t, rdb, "A"), map[string]string{"available": "8", "reserved": "2", "fence": "1", "elided": "1:0"})
	want(t, stockHash(t, rdb, "B"), map[string]string{"available": "7", "reserved": "3", "fence": "5", "elided": "5:4"})
	if a, b := rdb.Get(ctx, rlock.TokenKey("A")).Val(), rdb.Get(ctx, rlock.TokenKey("B")).Val(); a != "0" || b != "4" {
		t.Fatalf("fencing counters A %q B %q after an elided basket, want 0 (created) and 4 (untouched)", a, b)
	}
	if _, err := store.ReserveLines(ctx, "o-2", lines("B", 1), inventory.Fences{"B": 4}); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("the holder of B's token 4 writing after the elided basket: %v, want ErrStaleFence", err)
	}

	// B's lock is held: nothing is written, no token drawn.
	rdb.HSet(ctx, rlock.LockKey("B"), "someone:1", 1)
	beforeA, beforeB, keys := stockHash(t, rdb, "A"), stockHash(t, rdb, "B"), dbsize(t, rdb)
	if _, err := store.ReserveLines(ctx, "o-3", lines("A", 1, "B", 1), elide); !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("B's lock held: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "A", beforeA, keys)
	checkUntouched(t, rdb, "B", beforeB, keys)
	if a, b := rdb.Get(ctx, rlock.TokenKey("A")).Val(), rdb.Get(ctx, rlock.TokenKey("B")).Val(); a != "0" || b != "4" {
		t.Fatalf("fencing counters A %q B %q after a refused elision, want 0 and 4 (untouched)", a, b)
	}
	rdb.Del(ctx, rlock.LockKey("B"))

	// A replay draws no token and gives the first outcome.
	out, err = store.ReserveLines(ctx, "o-1", lines("A", 2, "B", 3), elide)
	if err != nil || !out.Lines[0].Replayed || out.Lines[1].Fence != 5 {
		t.Fatalf("replay: %+v, %v; want the first outcome replayed", out, err)
	}
	if got := rdb.Get(ctx, rlock.TokenKey("B")).Val(); got != "4" {
		t.Fatalf("fencing counter %s after a replay, want 4", got)
	}

	// A rejected basket is decided under its tokens too: the fences, raised by the elided basket with no
	// acquisition since, are kept.
	out, err = store.ReserveLines(ctx, "o-4", lines("A", 1, "B", 50), elide)
	if err != nil || out.Status != order.StatusRejected || out.Lines[0].Fence != 1 || out.Lines[1].Fence != 5 {
		t.Fatalf("short basket: %+v, %v; want rejected under tokens 1 and 5", out, err)
	}

	// ElideLock on some lines only is invalid; a lifecycle call never elides.
	if _, err := store.ReserveLines(ctx, "o-5", lines("A", 1, "B", 1), inventory.Fences{"A": inventory.ElideLock, "B": 6}); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("ElideLock on one line of two: %v, want ErrInvalid", err)
	}
	if _, err := store.Cancel(ctx, "o-1", "A", elide); !errors.Is(err, order.ErrInvalid) {
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
	beforeB, keys := stockHash(t, rdb, "B"), dbsize(t, rdb)
	_, err := store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1), inventory.Fences{"A": inventory.ElideLock, "B": inventory.ElideLock})
	if !errors.Is(err, inventory.ErrLocked) {
		t.Fatalf("elided basket begun line by line: %v, want ErrLocked", err)
	}
	checkUntouched(t, rdb, "B", beforeB, keys)
	out, err := store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1), inventory.Fences{"A": 7, "B": 7})
	if err != nil || out.Status != order.StatusReserved || !out.Lines[0].Replayed || out.Lines[1].Replayed {
		t.Fatalf("under its locks: %+v, %v; want the first line replayed, the second reserved", out, err)
	}
}
