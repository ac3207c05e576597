package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// everyKey is every key of the server with its value (hashes as maps), to prove a call wrote nothing.
func everyKey(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		if rdb.Type(ctx, k).Val() == "hash" {
			out[k] = fmt.Sprint(rdb.HGetAll(ctx, k).Val())
		} else {
			out[k] = rdb.Get(ctx, k).Val()
		}
	}
	return out
}

// A cancel or fulfil with a token one below the SKU's stored fence, or one below the lock's fencing
// counter (a newer holder that has not written yet), is refused and changes nothing: in one script on one
// Redis, and line by line as on a cluster.
func TestAStaleTokensCancelAndFulfilAreRefused(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	for _, run := range []struct {
		name, prefix string
		opts         []inventory.Option
		stale        string // the line with the stale token: in one script the last, line by line the first
	}{
		{"one script", "one-", []inventory.Option{inventory.WithFenceCounter(rlock.TokenKey)}, "B"},
		{"line by line", "saga-", []inventory.Option{inventory.WithFenceCounter(rlock.TokenKey),
			inventory.WithCrashAfterLine(func(int) error { return nil })}, "A"},
	} {
		t.Run(run.name, func(t *testing.T) {
			store := inventory.New(rdb, run.opts...)
			a, b, stale := run.prefix+"A", run.prefix+"B", run.prefix+run.stale
			seed(t, store, map[string]int64{a: 10, b: 10})
			rdb.Set(ctx, rlock.TokenKey(a), 5, 0)
			rdb.Set(ctx, rlock.TokenKey(b), 5, 0)
			if _, err := store.ReserveLines(ctx, "o-1", lines(a, 2, b, 3), inventory.Fences{a: 5, b: 5}); err != nil {
				t.Fatal(err)
			}
			rdb.Set(ctx, rlock.TokenKey(stale), 6, 0) // its lock has a newer holder, token 6, that has not written
			for _, tc := range []struct {
				what    string
				fences  inventory.Fences
				current bool
			}{
				{"a token one below the stored fence", inventory.Fences{a: 6, b: 6, stale: 4}, false},
				{"a token one below the lock's counter", inventory.Fences{a: 5, b: 5}, true},
			} {
				for _, op := range []string{"cancel", "fulfil"} {
					before := everyKey(t, rdb)
					call := store.Cancel
					if op == "fulfil" {
						call = store.Fulfil
					}
					got, err := call(ctx, "o-1", a, tc.fences)
					var stale *inventory.StaleFenceError
					if !errors.As(err, &stale) || stale.Current != tc.current {
						t.Fatalf("%s with %s: %s, %v; want a StaleFenceError (current %v)", op, tc.what, statuses(got), err, tc.current)
					}
					if after := everyKey(t, rdb); !maps.Equal(after, before) {
						t.Fatalf("%s with %s wrote:\nbefore %v\nafter  %v", op, tc.what, before, after)
					}
				}
			}
		})
	}
}

// RaiseFence raises a fence the SKU has already, not only a first one: fence 2, RaiseFence(5) stores 5, and
// from then on token 3 is refused.
func TestRaiseFenceRaisesAnExistingFence(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10})
	for _, token := range []int64{2, 5} {
		if err := store.RaiseFence(ctx, "A", token); err != nil {
			t.Fatalf("raise to %d: %v", token, err)
		}
	}
	if st, err := store.Get(ctx, "A"); err != nil || st.Fence != 5 {
		t.Fatalf("stock %+v, %v; want fence 5", st, err)
	}
	var stale *inventory.StaleFenceError
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "A", Quantity: 1}, 3); !errors.As(err, &stale) || stale.Stored != 5 {
		t.Fatalf("token 3 after the fence was raised to 5: %v, want refused by fence 5", err)
	}
}

// An elided batch after a holder that wrote (fence 7, the counter's 7) decides under 8, past the fence,
// writing the fence and not the counter, and the holder's token 7 is then refused; the next acquisition's
// 8 is taken. A counter behind the fence is raised with it.
func TestAnElidedBatchGoesPastTheLastHoldersToken(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
	seed(t, store, map[string]int64{"A": 10})
	rdb.Set(ctx, rlock.TokenKey("A"), 7, 0)
	if _, err := store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-0", Quantity: 1}), 7); err != nil {
		t.Fatal(err)
	}
	outs, err := store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-1", Quantity: 2}), inventory.ElideLock)
	if err != nil || outs[0].Status != order.StatusReserved || outs[0].Fence != 8 {
		t.Fatalf("elided batch: %+v, %v; want reserved under token 8", outs, err)
	}
	if st, _ := store.Get(ctx, "A"); st.Fence != 8 || rdb.Get(ctx, rlock.TokenKey("A")).Val() != "7" {
		t.Fatalf("fence %d, counter %s; want 8 and 7", st.Fence, rdb.Get(ctx, rlock.TokenKey("A")).Val())
	}
	if _, err := store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-2", Quantity: 1}), 7); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 7 after the elided batch: %v, want ErrStaleFence", err)
	}
	rdb.Incr(ctx, rlock.TokenKey("A"))
	if _, err := store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-3", Quantity: 1}), 8); err != nil {
		t.Fatalf("the next acquisition's token 8: %v, want taken", err)
	}

	// A counter behind the fence (recreated low) is raised with the fence, its TTL kept, so that the next
	// acquisition's token is taken rather than refused and retried.
	rdb.Set(ctx, rlock.TokenKey("A"), 3, time.Hour)
	outs, err = store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-4", Quantity: 1}), inventory.ElideLock)
	if err != nil || outs[0].Fence != 9 || rdb.Get(ctx, rlock.TokenKey("A")).Val() != "8" || rdb.PTTL(ctx, rlock.TokenKey("A")).Val() < 59*time.Minute {
		t.Fatalf("elided batch with the counter at 3, the fence at 8: %+v, %v, counter %s (TTL %v); want token 9, counter 8, its TTL kept",
			outs, err, rdb.Get(ctx, rlock.TokenKey("A")).Val(), rdb.PTTL(ctx, rlock.TokenKey("A")).Val())
	}
	rdb.Incr(ctx, rlock.TokenKey("A"))
	if _, err := store.ReserveBatch(ctx, batchOf("A", inventory.Order{ID: "o-5", Quantity: 1}), 9); err != nil {
		t.Fatalf("the next acquisition's token 9: %v, want taken", err)
	}
}
