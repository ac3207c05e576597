package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func batchOf(sku string, orders ...inventory.Order) []inventory.Order {
	for i := range orders {
		orders[i].SKU = sku
	}
	return orders
}

// records returns the outcome record and its TTL of every order key of sku, by order id.
func records(t *testing.T, rdb *redis.Client, sku string) map[string]string {
	t.Helper()
	ctx := context.Background()
	prefix := "order:{" + sku + "}:"
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		pttl := rdb.PTTL(ctx, k).Val()
		if pttl <= 50*time.Second || pttl > time.Minute {
			t.Errorf("PTTL %s = %v, want just under the outcome TTL of 1m", k, pttl)
		}
		out[strings.TrimPrefix(k, prefix)] = rdb.Get(ctx, k).Val()
	}
	return out
}

// A batch decides as Reserve called for each of its orders in turn: checked on a twin SKU given the same
// stock, history and orders, with and without the lock's fencing counter.
func TestReserveBatchEqualsSequentialReserves(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	counter := func(sku string) string { return "token:{" + sku + "}" }
	for _, tc := range []struct {
		name, tag string // tag: the SKUs' suffix, one pair per case
		opts      []inventory.Option
	}{
		{"without a fence counter", "plain", nil},
		{"with a fence counter", "counter", []inventory.Option{inventory.WithFenceCounter(counter)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := inventory.New(rdb, append(tc.opts, inventory.WithOutcomeTTL(time.Minute))...)
			batch, seq := "BATCH-"+tc.tag, "SEQ-"+tc.tag
			for _, sku := range []string{batch, seq} {
				if err := store.SetStock(ctx, sku, 10); err != nil {
					t.Fatal(err)
				}
				if _, err := store.Reserve(ctx, inventory.Order{ID: "old", SKU: sku, Quantity: 2}, 3); err != nil {
					t.Fatal(err)
				}
				rdb.Set(ctx, counter(sku), 5, 0) // a newer lock holder, below the batch's token 6
			}
			orders := []inventory.Order{{ID: "o-1", Quantity: 4}, {ID: "o-2", Quantity: 3},
				{ID: "old", Quantity: 5}, {ID: "o-1", Quantity: 1}, {ID: "o-3", Quantity: 5},
				{ID: "o-4", Quantity: 1}, {ID: "o-5", Quantity: 1}, {ID: "o-3", Quantity: 1}}

			got, err := store.ReserveBatch(ctx, batchOf(batch, orders...), 6)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(orders) {
				t.Fatalf("%d outcomes for %d orders", len(got), len(orders))
			}
			for i, o := range batchOf(seq, orders...) {
				w, err := store.Reserve(ctx, o, 6)
				if err != nil {
					t.Fatal(err)
				}
				w.SKU = batch
				if got[i] != w {
					t.Errorf("order %d: batch %+v, Reserve %+v", i, got[i], w)
				}
			}
			checkDecisions(t, got)
			want(t, stockHash(t, rdb, batch), stockHash(t, rdb, seq))
			if b, s := records(t, rdb, batch), records(t, rdb, seq); fmt.Sprint(b) != fmt.Sprint(s) || len(b) != 6 {
				t.Fatalf("records of the batch %v, of the Reserve calls %v", b, s)
			}
		})
	}
}

// checkDecisions guards the twin comparison against both sides being wrong the same way.
func checkDecisions(t *testing.T, got []inventory.Outcome) {
	t.Helper()
	var s []string
	for _, o := range got {
		s = append(s, fmt.Sprintf("%s/%s/%d/%d/%v", o.Status, o.Reason, o.Quantity, o.AvailableAfter, o.Replayed))
	}
	w := "[reserved//4/4/false reserved//3/1/false reserved//2/8/true reserved//4/4/true " +
		"rejected/insufficient_stock/5/1/false reserved//1/0/false rejected/insufficient_stock/1/0/false " +
		"rejected/insufficient_stock/5/1/true]"
	if fmt.Sprint(s) != w {
		t.Fatalf("outcomes %v, want %v", s, w)
	}
}

// checkUntouched fails unless the SKU's stock and the key count are as before.
func checkUntouched(t *testing.T, rdb *redis.Client, sku string, before map[string]string, keys int64) {
	t.Helper()
	want(t, stockHash(t, rdb, sku), before)
	if n := dbsize(t, rdb); n != keys {
		t.Fatalf("DBSIZE = %d after a refused batch, want %d", n, keys)
	}
}

func TestReserveBatchWithAStaleFenceWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-0", SKU: "SKU-1", Quantity: 1}, 7); err != nil {
		t.Fatal(err)
	}
	before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)

	_, err := store.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-0", Quantity: 1},
		inventory.Order{ID: "o-1", Quantity: 1}, inventory.Order{ID: "o-2", Quantity: 1}), 6)
	var stale *inventory.StaleFenceError
	if !errors.As(err, &stale) || stale.Stored != 7 || stale.Token != 6 || stale.Current || !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 6 under fence 7: %v, want a StaleFenceError about fence 7", err)
	}
	t.Log(err)
	checkUntouched(t, rdb, "SKU-1", before, keys)

	// Orders that all have an outcome are replayed, as Reserve replays them, whatever the token.
	outs, err := store.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-0", Quantity: 3}), 6)
	if err != nil || len(outs) != 1 || !outs[0].Replayed || outs[0].Fence != 7 || outs[0].Quantity != 1 {
		t.Fatalf("a replay with token 6: %+v, %v; want the outcome recorded with token 7", outs, err)
	}
	checkUntouched(t, rdb, "SKU-1", before, keys)

	if _, err := store.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-1", Quantity: 1}), 9); err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "8", "reserved": "2", "fence": "9"})
}

func TestReserveBatchRefusesATokenBelowTheFenceCounter(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithFenceCounter(func(sku string) string { return "token:{" + sku + "}" }))
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "token:{SKU-1}", 2, 0) // holder 2 took the lock and has not written
	before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)
	orders := batchOf("SKU-1", inventory.Order{ID: "o-1", Quantity: 1}, inventory.Order{ID: "o-2", Quantity: 1})

	_, err := store.ReserveBatch(ctx, orders, 1)
	var stale *inventory.StaleFenceError
	if !errors.As(err, &stale) || !stale.Current || stale.Stored != 2 || stale.Token != 1 {
		t.Fatalf("token 1 under counter 2: %v, want a StaleFenceError about the current token 2", err)
	}
	checkUntouched(t, rdb, "SKU-1", before, keys)

	if outs, err := store.ReserveBatch(ctx, orders, 2); err != nil || outs[1].AvailableAfter != 8 {
		t.Fatalf("the current token: %+v, %v", outs, err)
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "8", "reserved": "2", "fence": "2"})
}

func TestReserveBatchOnCorruptStockWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	for _, field := range []string{"available", "reserved"} {
		t.Run(field, func(t *testing.T) {
			rdb.HSet(ctx, "stock:{SKU-1}", "available", "10", "reserved", "0", field, "1.5")
			before, keys := stockHash(t, rdb, "SKU-1"), dbsize(t, rdb)

			_, err := store.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-1", Quantity: 1}), 4)
			if !errors.Is(err, inventory.ErrCorrupt) || !strings.Contains(err.Error(), "stock field "+field) {
				t.Fatalf("got %v, want ErrCorrupt naming %s", err, field)
			}
			checkUntouched(t, rdb, "SKU-1", before, keys)
		})
	}
}

// A batch with an order whose stored outcome record is not one (JSON without a status, a number, text)
// fails with ErrCorrupt, which no retry mends: the handler then decides the batch one order at a time, so
// that only that order fails.
func TestReserveBatchWithACorruptRecordIsCorrupt(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	for i, record := range []string{`{"quantity":1}`, `5`, `not json`} {
		t.Run(record, func(t *testing.T) {
			bad := fmt.Sprintf("o-bad-%d", i)
			rdb.Set(ctx, inventory.OrderKey("SKU-1", bad), record, 0)
			_, err := store.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: fmt.Sprintf("o-%d", i), Quantity: 1},
				inventory.Order{ID: bad, Quantity: 1}), 0)
			if !inventory.IsPermanent(err) {
				t.Fatalf("got %v, want a permanent error (ErrCorrupt)", err)
			}
		})
	}
}

// commandCount counts the commands a client sends.
type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func TestReserveBatchRefusesInvalidInputBeforeRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	sent := &commandCount{}
	rdb.AddHook(sent)
	store := inventory.New(rdb)
	many := make([]inventory.Order, inventory.MaxBatch+1)
	for i := range many {
		many[i] = inventory.Order{ID: fmt.Sprintf("o-%d", i), SKU: "SKU-1", Quantity: 1}
	}
	ok := inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 1}
	for _, tc := range []struct {
		name   string
		orders []inventory.Order
		fence  int64
		msg    string
	}{
		{"orders of two SKUs name the order and both SKUs", []inventory.Order{ok, {ID: "o-2", SKU: "SKU-2", Quantity: 1}}, 0,
			`invalid sku "SKU-2" of batch order 1, id "o-2": want "SKU-1", the sku of the batch's first order`},
		{"an empty batch", nil, 0, "invalid batch size 0: want 1-64"},
		{"a batch over MaxBatch", many, 0, "invalid batch size 65: want 1-64"},
		{"an invalid quantity names the order", []inventory.Order{ok, {ID: "o-2", SKU: "SKU-1"}}, 0,
			`invalid quantity 0: want 1-1000000 (batch order 1, id "o-2")`},
		{"an invalid order id names the order", []inventory.Order{ok, {ID: "o 2", SKU: "SKU-1", Quantity: 1}}, 0,
			`invalid order id "o 2": want 1-128 characters of A-Z a-z 0-9 . _ : - (batch order 1, id "o 2")`},
		{"an invalid sku in the first order", []inventory.Order{{ID: "o-1", SKU: "a b", Quantity: 1}}, 0,
			`invalid sku "a b": want 1-128 characters of A-Z a-z 0-9 . _ : - (batch order 0, id "o-1")`},
		{"a negative fence", []inventory.Order{ok}, -1, "invalid fence -1: want 0-1000000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sent.n.Load()
			outs, err := store.ReserveBatch(ctx, tc.orders, tc.fence)
			if !errors.Is(err, order.ErrInvalid) || err.Error() != tc.msg || outs != nil {
				t.Fatalf("got %v, %v; want ErrInvalid %q", outs, err, tc.msg)
			}
			if n := sent.n.Load() - before; n != 0 {
				t.Fatalf("%d commands sent for an invalid batch, want none", n)
			}
		})
	}
	if _, err := store.ReserveBatch(ctx, many[:inventory.MaxBatch], 0); err != nil || sent.n.Load() == 0 {
		t.Fatalf("a batch of MaxBatch orders: %v (the hook counted %d commands)", err, sent.n.Load())
	}
}

func TestReserveBatchOfAnUnknownSKURejectsEveryOrder(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	orders := batchOf("NOPE", inventory.Order{ID: "o-1", Quantity: 1}, inventory.Order{ID: "o-2", Quantity: 3})

	outs, err := store.ReserveBatch(ctx, orders, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		w := inventory.Outcome{OrderID: orders[i].ID, SKU: "NOPE", Quantity: orders[i].Quantity,
			Status: order.StatusRejected, Reason: order.ReasonUnknownSKU, Fence: 5}
		if o != w {
			t.Errorf("order %d: %+v, want %+v", i, o, w)
		}
	}
	if n := rdb.Exists(ctx, "stock:{NOPE}").Val(); n != 0 {
		t.Fatal("a batch for an unknown SKU created its stock hash")
	}
	if n := dbsize(t, rdb); n != 2 {
		t.Fatalf("DBSIZE = %d, want 2 (one outcome per order)", n)
	}
	if again, err := store.ReserveBatch(ctx, orders, 5); err != nil || !again[0].Replayed || !again[1].Replayed {
		t.Fatalf("the batch again: %+v, %v; want both replayed", again, err)
	}
}

// ReserveBatches decides each batch as ReserveBatch would alone, in one pipeline: a batch that is invalid, or
// whose SKU's stock is corrupt, fails alone; it also works after Redis forgot its scripts (NOSCRIPT).
func TestReserveBatchesDecidesEachBatchAsAlone(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	for _, sku := range []string{"A", "B"} {
		if err := store.SetStock(ctx, sku, 3); err != nil {
			t.Fatal(err)
		}
	}
	rdb.HSet(ctx, stock.Key("BAD"), "available", "many")
	rdb.ScriptFlush(ctx)
	results := store.ReserveBatches(ctx, []inventory.Batch{
		{Ctx: ctx, Orders: batchOf("A", inventory.Order{ID: "a1", Quantity: 2}, inventory.Order{ID: "a2", Quantity: 2})},
		{Ctx: ctx, Orders: batchOf("BAD", inventory.Order{ID: "x1", Quantity: 1})},
		{Ctx: ctx, Orders: []inventory.Order{{ID: "m1", SKU: "A", Quantity: 1}, {ID: "m2", SKU: "B", Quantity: 1}}},
		{Ctx: ctx, Orders: batchOf("B", inventory.Order{ID: "b1", Quantity: 3})},
	})
	if r := results[0]; r.Err != nil || r.Outcomes[0].Status != order.StatusReserved || r.Outcomes[1].Reason != order.ReasonInsufficientStock {
		t.Errorf("batch of A: %+v, want a1 reserved and a2 rejected for stock", r)
	}
	if r := results[1]; !inventory.IsPermanent(r.Err) {
		t.Errorf("batch of the corrupt SKU: %v, want a permanent error", r.Err)
	}
	if r := results[2]; !errors.Is(r.Err, order.ErrInvalid) {
		t.Errorf("batch of two SKUs: %v, want ErrInvalid", r.Err)
	}
	if r := results[3]; r.Err != nil || r.Outcomes[0].Status != order.StatusReserved || r.Outcomes[0].AvailableAfter != 0 {
		t.Errorf("batch of B: %+v, want b1 reserved, nothing left", r)
	}
}

// A basket in ReserveBatches is reserved as ReserveLines would alone, its script in the one pipeline with
// the batches' (one round trip for them all): with a batch of one of its SKUs before it, a basket refused
// (a lock held, elided), an invalid one and one the script hands to the saga (begun line by line), each on
// its own; Redis ends as the same calls made one at a time leave another Redis.
func TestReserveBatchesReservesABasketAsReserveLinesWould(t *testing.T) {
	ctx := context.Background()
	var stores []*inventory.Store
	var rdbs []*redis.Client
	for range 2 {
		rdb := redistest.Start(t).Client()
		store := inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))
		seed(t, store, map[string]int64{"A": 5, "B": 5, "C": 5, "D": 5})
		rdb.HSet(ctx, rlock.LockKey("C"), "someone:1", 1) // C's lock is held
		// o-5's first line recorded by a saga whose process died (its stock as it was: only the records count).
		rdb.Set(ctx, "order:{A}:o-5", `{"status":"reserved","reason":"","quantity":1,"available_after":4,"fence":0,"lines":[{"sku":"A","quantity":1},{"sku":"D","quantity":1}]}`, time.Hour)
		stores, rdbs = append(stores, store), append(rdbs, rdb)
	}
	elide := func(skus ...string) inventory.Fences {
		f := inventory.Fences{}
		for _, sku := range skus {
			f[sku] = inventory.ElideLock
		}
		return f
	}
	batches := []inventory.Batch{
		{Ctx: ctx, Orders: batchOf("A", inventory.Order{ID: "o-1", Quantity: 3}), Fence: inventory.ElideLock},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "o-2", Lines: lines("B", 2, "A", 3), Fences: elide("A", "B")}},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "o-3", Lines: lines("B", 1, "C", 1), Fences: elide("B", "C")}},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "o-4", Lines: []order.Line{{SKU: "B", Quantity: 0}}, Fences: elide("B")}},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "o-5", Lines: lines("D", 1, "A", 1), Fences: inventory.Fences{"A": 0, "D": 0}}},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "o-6", Lines: lines("A", 1, "B", 1), Fences: elide("A", "B")}},
	}

	reads := func() int64 {
		info := rdbs[0].Info(ctx, "stats").Val()
		_, rest, _ := strings.Cut(info, "total_reads_processed:")
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
		return n
	}
	// Once Redis knows the scripts, a batch and a basket are one round trip.
	warm := []inventory.Batch{
		{Ctx: ctx, Orders: batchOf("W", inventory.Order{ID: "w-1", Quantity: 1})},
		{Ctx: ctx, Basket: &inventory.Basket{OrderID: "w-2", Lines: lines("W", 1, "X", 1)}},
	}
	stores[0].ReserveBatches(ctx, warm) // NOSCRIPT: each alone, Redis learns the scripts
	before := reads()
	if r := stores[0].ReserveBatches(ctx, warm); r[1].Err != nil || !r[1].Order.Replayed {
		t.Fatalf("the basket again: %+v, want it replayed", r[1])
	}
	if n := reads() - before - 1; n != 1 { // (- 1: the second INFO)
		t.Errorf("%d reads of the client's socket for a batch and a basket, want 1", n)
	}

	got := stores[0].ReserveBatches(ctx, batches)
	for i, b := range batches {
		var alone inventory.BatchResult
		if b.Basket == nil {
			alone.Outcomes, alone.Err = stores[1].ReserveBatch(ctx, b.Orders, b.Fence)
		} else {
			alone.Order, alone.Err = stores[1].ReserveLines(ctx, b.Basket.OrderID, b.Basket.Lines, b.Basket.Fences)
		}
		if fmt.Sprint(got[i]) != fmt.Sprint(alone) {
			t.Errorf("batch %d: %+v, alone %+v", i, got[i], alone)
		}
	}
	if r := got[1]; r.Err != nil || r.Order.Status != order.StatusRejected || r.Order.SKU != "A" {
		t.Errorf("o-2: %+v, want rejected for A's stock (the batch before it took 3 of 5)", r)
	}
	if !errors.Is(got[2].Err, inventory.ErrLocked) || !errors.Is(got[3].Err, order.ErrInvalid) {
		t.Errorf("o-3, o-4: %v, %v; want ErrLocked (C's lock held), ErrInvalid (quantity 0)", got[2].Err, got[3].Err)
	}
	if r := got[4]; r.Err != nil || r.Order.Status != order.StatusReserved || len(r.Order.Lines) != 2 {
		t.Errorf("o-5: %+v, want its saga finished, both lines reserved", r)
	}
	for _, sku := range []string{"A", "B", "C", "D"} {
		want(t, stockHash(t, rdbs[0], sku), stockHash(t, rdbs[1], sku))
	}
}
