package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// reserveAll reserves one unit for each of n orders "o-0".."o-<n-1>" from 64 goroutines spread over the
// stores, and returns the outcomes by order index.
func reserveAll(t *testing.T, stores []*inventory.Store, sku string, n int) []inventory.Outcome {
	t.Helper()
	outcomes := make([]inventory.Outcome, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		store := stores[g%len(stores)]
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				o, err := store.Reserve(context.Background(), inventory.Order{ID: fmt.Sprintf("o-%d", i), SKU: sku, Quantity: 1}, 0)
				if err != nil {
					t.Errorf("reserve o-%d: %v", i, err)
					return
				}
				outcomes[i] = o
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return outcomes
}

func threeStores(s *redistest.Server) []*inventory.Store {
	return []*inventory.Store{inventory.New(s.Client()), inventory.New(s.Client()), inventory.New(s.Client())}
}

func TestConcurrentOrdersNeverOversell(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	stores := threeStores(s)
	if err := stores[0].SetStock(context.Background(), "SKU-1", 5000); err != nil {
		t.Fatal(err)
	}

	outcomes := reserveAll(t, stores, "SKU-1", 6000)

	reserved, rejected := 0, 0
	seenAfter := make(map[int64]bool) // atomic decrements hand out every level 4999..0 exactly once
	for i, o := range outcomes {
		switch {
		case o.Status == order.StatusReserved && o.Reason == "" && !o.Replayed:
			reserved++
			if o.AvailableAfter < 0 || o.AvailableAfter >= 5000 || seenAfter[o.AvailableAfter] {
				t.Fatalf("o-%d: available_after %d out of range or seen twice", i, o.AvailableAfter)
			}
			seenAfter[o.AvailableAfter] = true
		case o.Status == order.StatusRejected && o.Reason == order.ReasonInsufficientStock &&
			o.AvailableAfter == 0 && !o.Replayed:
			rejected++
		default:
			t.Fatalf("o-%d: unexpected outcome %+v", i, o)
		}
	}
	if reserved != 5000 || rejected != 1000 {
		t.Fatalf("reserved %d, rejected %d; want 5000 and 1000", reserved, rejected)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "0", "reserved": "5000"})
	if n := dbsize(t, rdb); n != 6002 {
		t.Fatalf("DBSIZE = %d, want 6002 (stock hash, the stock count's latch and one outcome per order)", n)
	}
}

func TestRedeliveredOrdersReplayTheirFirstOutcome(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	stores := threeStores(s)
	if err := stores[0].SetStock(context.Background(), "SKU-1", 5000); err != nil {
		t.Fatal(err)
	}
	first := reserveAll(t, stores, "SKU-1", 6000)
	before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)

	again := reserveAll(t, stores, "SKU-1", 6000)

	for i := range first {
		w := first[i]
		w.Replayed = true
		if again[i] != w {
			t.Fatalf("o-%d replayed as %+v, want %+v", i, again[i], w)
		}
	}
	want(t, stockHash(t, rdb, "SKU-1"), before)
	if n := dbsize(t, rdb); n != keys {
		t.Fatalf("DBSIZE = %d after replay, want %d", n, keys)
	}
}

func TestReplayWithAnotherQuantityReturnsTheRecordedOutcome(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 2}, 0); err != nil {
		t.Fatal(err)
	}
	o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 5}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := inventory.Outcome{OrderID: "o-1", SKU: "SKU-1", Quantity: 2, Status: order.StatusReserved,
		AvailableAfter: 8, Replayed: true}
	if o != w {
		t.Fatalf("replay = %+v, want %+v", o, w)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "8", "reserved": "2"})
}

func TestInsufficientStockReportsWhatIsAvailable(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 3); err != nil {
		t.Fatal(err)
	}

	o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 4}, 0)
	w := inventory.Outcome{OrderID: "o-1", SKU: "SKU-1", Quantity: 4, Status: order.StatusRejected,
		Reason: order.ReasonInsufficientStock, AvailableAfter: 3}
	if err != nil || o != w {
		t.Fatalf("4 of 3: %+v, %v; want %+v", o, err, w)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "3", "reserved": "0"})

	o, err = store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 3}, 0)
	if err != nil || o.Status != order.StatusReserved || o.AvailableAfter != 0 {
		t.Fatalf("3 of 3: %+v, %v", o, err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "0", "reserved": "3"})
}

func TestStaleFenceIsRefusedAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 7); err != nil || o.Fence != 7 {
		t.Fatalf("token 7: %+v, %v", o, err)
	}
	before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)

	_, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 6)
	if !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 6: got %v, want ErrStaleFence", err)
	}
	t.Log(err)
	want(t, stockHash(t, rdb, "SKU-1"), before)
	if n := dbsize(t, rdb); n != keys {
		t.Fatalf("DBSIZE = %d after a stale reserve, want %d", n, keys)
	}

	o, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 8)
	if err != nil || o.Status != order.StatusReserved || o.Fence != 8 || o.AvailableAfter != 8 {
		t.Fatalf("token 8: %+v, %v", o, err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "8", "reserved": "2", "fence": "8"})

	// Unfenced calls neither check nor lower the fence.
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-3", SKU: "SKU-1", Quantity: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if got := stockHash(t, rdb, "SKU-1")["fence"]; got != "8" {
		t.Fatalf("fence = %s after an unfenced reserve, want 8", got)
	}
}

func TestUnknownSKUIsRejectedAndRecorded(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)

	o, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "NOPE", Quantity: 1}, 5)
	w := inventory.Outcome{OrderID: "o-1", SKU: "NOPE", Quantity: 1, Status: order.StatusRejected,
		Reason: order.ReasonUnknownSKU, Fence: 5}
	if err != nil || o != w {
		t.Fatalf("got %+v, %v; want %+v", o, err, w)
	}
	if n, _ := rdb.Exists(ctx, "stock:{NOPE}").Result(); n != 0 {
		t.Fatal("a reserve for an unknown SKU created its stock hash")
	}
	if again, _ := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "NOPE", Quantity: 1}, 5); !again.Replayed {
		t.Fatalf("second call not replayed: %+v", again)
	}
}

// With the lock's fencing counter, a token below it is refused as soon as a newer holder has its token,
// before that holder wrote; without the counter key the stored fence alone decides.
func TestFenceCounterRefusesAStaleTokenBeforeTheNewHolderWrites(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	counter := func(sku string) string { return "token:{" + sku + "}" }
	store := inventory.New(rdb, inventory.WithFenceCounter(counter))
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "token:{SKU-1}", 2, 0) // holder 2 took the lock and has not written

	_, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 1)
	var stale *inventory.StaleFenceError
	if !errors.As(err, &stale) || !stale.Current || stale.Stored != 2 || !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 1 under counter 2: %v, want a StaleFenceError about the current token 2", err)
	}
	if got, _ := store.Get(ctx, "SKU-1"); got.Available != 10 || rdb.Exists(ctx, "order:{SKU-1}:o-1").Val() != 0 {
		t.Fatalf("stock %+v after a refused write, want it untouched and no outcome recorded", got)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 2); err != nil {
		t.Fatalf("the current token: %v", err)
	}
	rdb.Set(ctx, "token:{SKU-1}", 5, 0)
	if _, err := store.Release(ctx, "o-2", "SKU-1", 3); !errors.As(err, &stale) || !stale.Current || stale.Stored != 5 {
		t.Fatalf("release with token 3 under counter 5 (stored fence 2): %v, want refused by the counter", err)
	}
	rdb.Del(ctx, "token:{SKU-1}") // a lost counter: the stored fence (2) still refuses token 1
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-3", SKU: "SKU-1", Quantity: 1}, 1); !errors.As(err, &stale) || stale.Current {
		t.Fatalf("token 1 with the counter gone: %v, want refused by the stored fence", err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-4", SKU: "SKU-1", Quantity: 1}, 0); err != nil {
		t.Fatalf("an unfenced write: %v", err)
	}
}

// RaiseFence (Redlock's acquisition) refuses every older token from the moment it stores the new one,
// before the new holder writes; it never lowers the fence and leaves no fence on an unknown SKU.
func TestRaiseFenceRefusesOlderTokensBeforeTheNewHolderWrites(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if err := store.RaiseFence(ctx, "SKU-1", 2); err != nil {
		t.Fatalf("raise to 2: %v", err)
	}
	_, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}, 1)
	var stale *inventory.StaleFenceError
	if !errors.As(err, &stale) || stale.Stored != 2 {
		t.Fatalf("token 1 after the fence was raised to 2: %v, want a StaleFenceError about fence 2", err)
	}
	if got, _ := store.Get(ctx, "SKU-1"); got.Available != 10 || got.Fence != 2 {
		t.Fatalf("stock %+v, want available 10 and fence 2", got)
	}
	if err := store.RaiseFence(ctx, "SKU-1", 2); err != nil {
		t.Fatalf("raise to the stored fence again: %v", err)
	}
	if err := store.RaiseFence(ctx, "SKU-1", 1); !errors.As(err, &stale) || stale.Stored != 2 || stale.Token != 1 {
		t.Fatalf("raise to 1 under fence 2: %v, want a StaleFenceError (the lock's counter fell behind)", err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 2); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	if err := store.RaiseFence(ctx, "NOPE", 3); err != nil || rdb.Exists(ctx, "stock:{NOPE}").Val() != 0 {
		t.Fatalf("raise on an unknown SKU: %v, created its hash: %v", err, rdb.Exists(ctx, "stock:{NOPE}").Val() == 1)
	}
	if err := store.RaiseFence(ctx, "SKU-1", 0); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("token 0: %v, want ErrInvalid", err)
	}
}
