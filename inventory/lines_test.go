package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// linesStores are the two ways a basket runs: one script on one Redis, and line by line (a saga) on a
// cluster, whose SKUs' keys are in different slots.
func linesStores(t *testing.T) map[string]redis.UniversalClient {
	return map[string]redis.UniversalClient{
		"one redis": redistest.Start(t).Client(),
		"cluster":   redistest.StartCluster(t).Client(),
	}
}

func seed(t *testing.T, store *inventory.Store, stock map[string]int64) {
	t.Helper()
	for sku, n := range stock {
		if err := store.SetStock(context.Background(), sku, n); err != nil {
			t.Fatal(err)
		}
	}
}

func lines(skuQty ...any) []order.Line {
	var ls []order.Line
	for i := 0; i < len(skuQty); i += 2 {
		ls = append(ls, order.Line{SKU: skuQty[i].(string), Quantity: int64(skuQty[i+1].(int))})
	}
	merged, err := order.MergeLines(ls)
	if err != nil {
		panic(err)
	}
	return merged
}

// checkStock fails unless each SKU's available and reserved are as given.
func checkStock(t *testing.T, store *inventory.Store, want map[string][2]int64) {
	t.Helper()
	for sku, w := range want {
		st, err := store.Get(context.Background(), sku)
		if err != nil {
			t.Fatal(err)
		}
		if st.Available != w[0] || st.Reserved != w[1] {
			t.Errorf("%s: available %d reserved %d, want %d %d", sku, st.Available, st.Reserved, w[0], w[1])
		}
	}
}

func statuses(o inventory.OrderOutcome) string {
	s := fmt.Sprintf("%s/%s/%s:", o.Status, o.Reason, o.SKU)
	for _, l := range o.Lines {
		s += fmt.Sprintf(" %s=%s/%s", l.SKU, l.Status, l.Reason)
	}
	return s
}

func TestReserveLinesIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 5, "B": 1, "C": 10})

			got, err := store.ReserveLines(ctx, "o-1", lines("B", 1, "A", 2), nil)
			if err != nil {
				t.Fatal(err)
			}
			if s := statuses(got); s != "reserved//: A=reserved/ B=reserved/" || got.Replayed {
				t.Fatalf("o-1: %s (replayed %v)", s, got.Replayed)
			}
			got, err = store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1, "C", 1), nil)
			if err != nil {
				t.Fatal(err)
			}
			if s := statuses(got); s != "rejected/insufficient_stock/B: A=rejected/other_line_rejected B=rejected/insufficient_stock C=rejected/other_line_rejected" {
				t.Fatalf("o-2: %s", s)
			}
			// Every line of a rejected basket has its record, also those after the short one on a cluster:
			// a cancel naming any of them finds the order rejected (not unknown, which it would remember).
			if got, err := store.Cancel(ctx, "o-2", "C", nil); err != nil || got.Reason != order.ReasonNotReserved {
				t.Fatalf("cancel of o-2 naming C: %s, %v; want not_reserved", statuses(got), err)
			}
			got, err = store.ReserveLines(ctx, "o-3", lines("C", 1, "NOPE", 1), nil)
			if err != nil || got.Status != order.StatusRejected || got.Reason != order.ReasonUnknownSKU || got.SKU != "NOPE" {
				t.Fatalf("o-3: %s, %v", statuses(got), err)
			}
			checkStock(t, store, map[string][2]int64{"A": {3, 2}, "B": {0, 1}, "C": {10, 0}})

			// A redelivery replays, even with other quantities.
			got, err = store.ReserveLines(ctx, "o-1", lines("A", 9, "B", 9), nil)
			if err != nil || !got.Replayed || got.Status != order.StatusReserved || got.Lines[0].Quantity != 2 {
				t.Fatalf("o-1 again: %s replayed %v, %v", statuses(got), got.Replayed, err)
			}
			got, err = store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1, "C", 1), nil)
			if err != nil || !got.Replayed || got.SKU != "B" {
				t.Fatalf("o-2 again: %s replayed %v, %v", statuses(got), got.Replayed, err)
			}
			checkStock(t, store, map[string][2]int64{"A": {3, 2}, "B": {0, 1}, "C": {10, 0}})

			for _, sku := range []string{"A", "B"} {
				ls, err := store.Lines(ctx, "o-1", sku)
				if err != nil || fmt.Sprint(ls) != "[{A 2} {B 1}]" {
					t.Errorf("Lines(o-1, %s) = %v, %v", sku, ls, err)
				}
			}
		})
	}
}

func TestReserveLinesRefusesStaleTokensAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 5, "B": 5})
			if err := store.RaiseFence(ctx, "A", 10); err != nil {
				t.Fatal(err)
			}
			_, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), inventory.Fences{"A": 9, "B": 3})
			if !errors.Is(err, inventory.ErrStaleFence) {
				t.Fatalf("err %v, want ErrStaleFence", err)
			}
			checkStock(t, store, map[string][2]int64{"A": {5, 0}, "B": {5, 0}})
			if _, err := store.Lines(ctx, "o-1", "B"); !errors.Is(err, inventory.ErrUnknownOrder) {
				t.Fatalf("a refused basket left a record: %v", err)
			}
			if _, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), inventory.Fences{"A": 11}); !errors.Is(err, inventory.ErrNotLocked) {
				t.Fatalf("a basket with a SKU without a fence: err %v, want ErrNotLocked", err)
			}
		})
	}
}

var errCrash = errors.New("crashed")

// reserveUntilCrash reserves order o-1's basket line by line with a store that crashes after line crashAt
// (0-based), as a worker killed mid-saga, and fails the test unless it crashed there.
func reserveUntilCrash(t *testing.T, rdb redis.UniversalClient, crashAt int, basket []order.Line) {
	t.Helper()
	crashing := inventory.New(rdb, inventory.WithCrashAfterLine(func(i int) error {
		if i == crashAt {
			return errCrash
		}
		return nil
	}))
	if _, err := crashing.ReserveLines(context.Background(), "o-1", basket, nil); !errors.Is(err, errCrash) {
		t.Fatalf("err %v, want the crash after line %d", err, crashAt+1)
	}
}

// A crash between the lines of a basket reserved line by line (a cluster) leaves it half done; the next
// call (the redelivery) finishes it, and the outcome and stock are those of a call that never crashed.
func TestBasketSagaConvergesAfterACrashAtEveryLine(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	for _, tc := range []struct {
		name  string
		stock int64 // of SKU C, the third of four lines, which wants 2
		want  string
	}{
		{"the basket fits", 2, "reserved//: A=reserved/ B=reserved/ C=reserved/ D=reserved/"},
		{"line C is short", 1, "rejected/insufficient_stock/C: A=rejected/other_line_rejected B=rejected/other_line_rejected C=rejected/insufficient_stock D=rejected/other_line_rejected"},
	} {
		for crashAt := range 3 {
			t.Run(fmt.Sprintf("%s, crash after line %d", tc.name, crashAt+1), func(t *testing.T) {
				p := fmt.Sprintf("%d-%d-", tc.stock, crashAt) // SKUs of their own
				basket := lines(p+"A", 1, p+"B", 1, p+"C", 2, p+"D", 1)
				store := inventory.New(rdb)
				seed(t, store, map[string]int64{p + "A": 5, p + "B": 5, p + "C": tc.stock, p + "D": 5})
				reserveUntilCrash(t, rdb, crashAt, basket)
				got, err := store.ReserveLines(ctx, "o-1", basket, nil)
				if err != nil {
					t.Fatal(err)
				}
				if s := statuses(got); s != prefixed(tc.want, p) {
					t.Fatalf("after the crash: %s\nwant %s", s, prefixed(tc.want, p))
				}
				took := int64(0)
				if got.Status == order.StatusReserved {
					took = 1
				}
				checkStock(t, store, map[string][2]int64{p + "A": {5 - took, took}, p + "B": {5 - took, took},
					p + "C": {tc.stock - 2*took, 2 * took}, p + "D": {5 - took, took}})
			})
		}
	}
}

// prefixed puts p before every SKU of a statuses string.
func prefixed(s, p string) string {
	out := ""
	for i := range len(s) {
		if (s[i] >= 'A' && s[i] <= 'D') && (i == 0 || s[i-1] == ' ' || s[i-1] == '/') && (i+1 == len(s) || s[i+1] == '=' || s[i+1] == ':') {
			out += p
		}
		out += string(s[i])
	}
	return out
}

func TestCancelAndFulfil(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 10, "B": 10})
			for _, id := range []string{"o-1", "o-2"} {
				if _, err := store.ReserveLines(ctx, id, lines("A", 2, "B", 3), nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := store.Reserve(ctx, inventory.Order{ID: "o-3", SKU: "A", Quantity: 1}, 0); err != nil {
				t.Fatal(err)
			}
			checkStock(t, store, map[string][2]int64{"A": {5, 5}, "B": {4, 6}})

			steps := []struct {
				op, id, sku, want string
				replayed          bool
			}{
				{"cancel", "o-1", "B", "cancelled//: A=cancelled/ B=cancelled/", false},
				{"cancel", "o-1", "A", "cancelled//: A=cancelled/ B=cancelled/", true},
				{"fulfil", "o-1", "A", "rejected/already_cancelled/A:", false},
				{"fulfil", "o-2", "A", "fulfilled//: A=fulfilled/ B=fulfilled/", false},
				{"fulfil", "o-2", "B", "fulfilled//: A=fulfilled/ B=fulfilled/", true},
				{"cancel", "o-2", "B", "rejected/already_fulfilled/B:", false},
				{"cancel", "o-3", "A", "cancelled//: A=cancelled/", false},
				{"cancel", "o-9", "A", "cancelled/cancelled_early/A:", false}, // remembered for when o-9 comes
				{"fulfil", "o-8", "A", "rejected/unknown_order/A:", false},
			}
			for _, s := range steps {
				op := store.Cancel
				if s.op == "fulfil" {
					op = store.Fulfil
				}
				got, err := op(ctx, s.id, s.sku, nil)
				if err != nil {
					t.Fatalf("%s %s: %v", s.op, s.id, err)
				}
				if statuses(got) != s.want || got.Replayed != s.replayed {
					t.Fatalf("%s %s: %s replayed %v, want %s replayed %v", s.op, s.id, statuses(got), got.Replayed, s.want, s.replayed)
				}
			}
			// o-1 went back, o-2 left for good, o-3 went back.
			checkStock(t, store, map[string][2]int64{"A": {8, 0}, "B": {7, 0}})
			for sku, fulfilled := range map[string]int64{"A": 2, "B": 3} {
				if st, _ := store.Get(ctx, sku); st.Fulfilled != fulfilled {
					t.Errorf("%s fulfilled %d, want %d", sku, st.Fulfilled, fulfilled)
				}
			}
			// A redelivered reservation of a cancelled order replays the cancellation.
			got, err := store.ReserveLines(ctx, "o-1", lines("A", 2, "B", 3), nil)
			if err != nil || got.Status != order.StatusCancelled || !got.Replayed {
				t.Fatalf("o-1 reserved again: %s replayed %v, %v", statuses(got), got.Replayed, err)
			}
			if _, err := store.Cancel(ctx, "o-2", "A", inventory.Fences{"A": 1}); !errors.Is(err, inventory.ErrNotLocked) {
				t.Fatalf("a cancel that holds only A's lock: err %v, want ErrNotLocked", err)
			}
		})
	}
}

// A cancel that finds a basket half reserved (a crash between its lines) cancels it whole; the basket's
// redelivery then replays the cancellation and reserves nothing.
func TestCancelOfAHalfReservedBasket(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 5, "B": 5, "C": 5})
	basket := lines("A", 1, "B", 2, "C", 3)
	reserveUntilCrash(t, rdb, 0, basket)
	checkStock(t, store, map[string][2]int64{"A": {4, 1}, "B": {5, 0}})
	got, err := store.Cancel(ctx, "o-1", "A", nil)
	if err != nil || statuses(got) != "cancelled//: A=cancelled/ B=cancelled/ C=cancelled/" {
		t.Fatalf("cancel: %s, %v", statuses(got), err)
	}
	got, err = store.ReserveLines(ctx, "o-1", basket, nil)
	if err != nil || got.Status != order.StatusCancelled {
		t.Fatalf("redelivered basket: %s, %v", statuses(got), err)
	}
	checkStock(t, store, map[string][2]int64{"A": {5, 0}, "B": {5, 0}, "C": {5, 0}})
}

// A fulfil that finds a basket half reserved finishes its reservation first, as the basket's redelivery
// would, and then fulfils it, or refuses it when the reservation is rejected: the reservation may never
// come back (poisoned after too many crashes), and a fulfil that waited for it was retried for ever. A
// cancel or fulfil that finds the saga stopped while it gave the lines back finishes that too. The
// redelivery, if it comes, reserves nothing more.
func TestLifecycleOfAStoppedBasketSaga(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	for _, tc := range []struct {
		name     string
		crashAt  int   // the saga stops after this line (0-based)
		stockOfC int64 // C wants 3
		early    bool  // a cancel naming D comes after the crash (D has no record yet: cancelled early)
		op       string
		want     string
		reserved string // what the redelivered reservation replays
		took     int64  // 1: the lines' stock went to fulfilled; 0: back to available
	}{
		{"fulfil, the basket fits", 0, 5, false, "fulfil", "fulfilled//: A=fulfilled/ B=fulfilled/ C=fulfilled/ D=fulfilled/", "fulfilled", 1},
		{"fulfil, line C is short", 0, 2, false, "fulfil", "rejected/not_reserved/A:", "rejected", 0},
		{"fulfil, stopped after C rejected, before the undo", 2, 2, false, "fulfil", "rejected/not_reserved/A:", "rejected", 0},
		{"cancel, stopped after C rejected, before the undo", 2, 2, false, "cancel", "rejected/not_reserved/A:", "rejected", 0},
		{"fulfil after an early cancel of the unreserved line D", 0, 5, true, "fulfil", "rejected/already_cancelled/A:", "cancelled", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := strings.NewReplacer(" ", "-", ",", "").Replace(tc.name) + "-" // SKUs of their own
			store := inventory.New(rdb)
			seeded := map[string]int64{"A": 5, "B": 5, "C": tc.stockOfC, "D": 5}
			for sku, n := range seeded {
				seed(t, store, map[string]int64{p + sku: n})
			}
			basket := lines(p+"A", 1, p+"B", 2, p+"C", 3, p+"D", 1)
			reserveUntilCrash(t, rdb, tc.crashAt, basket)
			if tc.early {
				if got, err := store.Cancel(ctx, "o-1", p+"D", nil); err != nil || got.Reason != order.ReasonCancelledEarly {
					t.Fatalf("cancel naming D: %s, %v; want cancelled early", statuses(got), err)
				}
			}
			op := store.Fulfil
			if tc.op == "cancel" {
				op = store.Cancel
			}
			got, err := op(ctx, "o-1", p+"A", nil)
			if err != nil || statuses(got) != prefixed(tc.want, p) {
				t.Fatalf("%s of the stopped basket: %s, %v; want %s", tc.op, statuses(got), err, prefixed(tc.want, p))
			}
			check := func() {
				t.Helper()
				for sku, want := range map[string]int64{"A": 1, "B": 2, "C": 3, "D": 1} {
					checkStockFulfilled(t, store, p+sku, seeded[sku]-tc.took*want, tc.took*want)
				}
			}
			check() // the reservation's redelivery may never come
			redelivered, err := store.ReserveLines(ctx, "o-1", basket, nil)
			if err != nil || string(redelivered.Status) != tc.reserved {
				t.Fatalf("redelivered basket: %s, %v; want %s", statuses(redelivered), err, tc.reserved)
			}
			check()
		})
	}
}

// A fulfil redelivered after some of its basket's records expired (OUTCOME_TTL: the fulfilled line's was
// renewed, the others' not) is refused as unknown; it does not take the lines without a record for a
// reservation stopped midway and reserve them again.
func TestAFulfilAfterRecordsExpiredReservesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 5, "B": 5, "C": 5})
	basket := lines("A", 1, "B", 2, "C", 3)
	if got, err := store.ReserveLines(ctx, "o-1", basket, nil); err != nil || got.Status != order.StatusReserved {
		t.Fatalf("reserve: %s, %v", statuses(got), err)
	}
	if got, err := store.Fulfil(ctx, "o-1", "A", nil); err != nil || got.Status != order.StatusFulfilled {
		t.Fatalf("fulfil: %s, %v", statuses(got), err)
	}
	for _, sku := range []string{"B", "C"} {
		if err := rdb.Del(ctx, "order:{"+sku+"}:o-1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.Fulfil(ctx, "o-1", "A", nil)
	if err != nil || got.Status != order.StatusRejected || got.Reason != order.ReasonUnknownOrder {
		t.Fatalf("fulfil after B's and C's records expired: %s, %v; want rejected/unknown_order", statuses(got), err)
	}
	for sku, want := range map[string]int64{"A": 1, "B": 2, "C": 3} {
		checkStockFulfilled(t, store, sku, 5-want, want)
	}
}

// The records of a basket are read one after the other: lines without a record next to records about to
// expire may be lines whose records expired between the reads, so the saga is not finished (that would
// reserve them again); the fulfil is refused as for an order whose records expired.
func TestAStoppedSagaWithExpiringRecordsIsNotFinished(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 5, "B": 5, "C": 5})
	reserveUntilCrash(t, rdb, 0, lines("A", 1, "B", 2, "C", 3))
	if err := rdb.PExpire(ctx, "order:{A}:o-1", 5*time.Second).Err(); err != nil { // far below a minute
		t.Fatal(err)
	}
	got, err := store.Fulfil(ctx, "o-1", "A", nil)
	if err != nil || got.Status != order.StatusRejected || got.Reason != order.ReasonUnknownOrder {
		t.Fatalf("fulfil of a stopped saga whose records expire: %s, %v; want rejected/unknown_order", statuses(got), err)
	}
	checkStock(t, store, map[string][2]int64{"A": {4, 1}, "B": {5, 0}, "C": {5, 0}})
}

// checkStockFulfilled fails unless sku has available and fulfilled as given and nothing reserved.
func checkStockFulfilled(t *testing.T, store *inventory.Store, sku string, available, fulfilled int64) {
	t.Helper()
	st, err := store.Get(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if st.Available != available || st.Reserved != 0 || st.Fulfilled != fulfilled {
		t.Errorf("%s: available %d reserved %d fulfilled %d, want %d 0 %d", sku, st.Available, st.Reserved,
			st.Fulfilled, available, fulfilled)
	}
}

func TestMergeLines(t *testing.T) {
	got, err := order.MergeLines([]order.Line{{SKU: "B", Quantity: 1}, {SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 3}})
	if err != nil || fmt.Sprint(got) != "[{A 2} {B 4}]" {
		t.Fatalf("MergeLines = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name    string
		lines   []order.Line
		mention string
	}{
		{"no lines", nil, "number of lines 0"},
		{"a bad SKU names its line", []order.Line{{SKU: "A", Quantity: 1}, {SKU: "a b", Quantity: 1}}, "line 2: "},
		{"a zero quantity names its line", []order.Line{{SKU: "A", Quantity: 0}}, "line 1: "},
		{"merged lines over the limit", []order.Line{{SKU: "A", Quantity: 600000}, {SKU: "A", Quantity: 600000}}, "add up to 1200000"},
		{"51 lines", make([]order.Line, 51), "number of lines 51"},
	} {
		_, err := order.MergeLines(tc.lines)
		if !errors.Is(err, order.ErrInvalid) || !contains(err.Error(), tc.mention) {
			t.Errorf("%s: err %v, want ErrInvalid mentioning %q", tc.name, err, tc.mention)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub))
}

// An order id is one order's: a basket, or a single-SKU order, whose id another order used is refused
// with ErrOrderConflict and writes nothing, rather than replaying the other order's records for some
// lines and reserving the rest (stock nothing could give back). The same SKUs replay, even with other
// quantities; a cancelled single-SKU order's redelivery still replays.
func TestAReusedOrderIDIsRefused(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 10, "B": 10, "C": 10})
			single := inventory.Order{ID: "o-2", SKU: "A", Quantity: 1}
			for _, step := range []func() error{
				func() error { _, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), nil); return err },
				func() error { _, err := store.Reserve(ctx, single, 0); return err },
			} {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			for what, call := range map[string]func() error{
				"o-1 with a line more": func() error {
					_, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1, "C", 2), nil)
					return err
				},
				"o-1 on other SKUs": func() error {
					_, err := store.ReserveLines(ctx, "o-1", lines("B", 1, "C", 1), nil)
					return err
				},
				"o-1 as a single-SKU order": func() error {
					_, err := store.ReserveBatch(ctx, []inventory.Order{{ID: "o-1", SKU: "B", Quantity: 1}}, 0)
					return err
				},
				"o-2 as a basket": func() error {
					_, err := store.ReserveLines(ctx, "o-2", lines("A", 3, "B", 2), nil)
					return err
				},
			} {
				if err := call(); !errors.Is(err, inventory.ErrOrderConflict) {
					t.Errorf("%s: %v, want ErrOrderConflict", what, err)
				}
			}
			checkStock(t, store, map[string][2]int64{"A": {8, 2}, "B": {9, 1}, "C": {10, 0}})
			if n := rdb.Exists(ctx, "order:{C}:o-1", "order:{B}:o-2").Val(); n != 0 {
				t.Fatalf("%d records written by refused orders", n)
			}

			if got, err := store.ReserveLines(ctx, "o-1", lines("A", 5, "B", 5), nil); err != nil || !got.Replayed {
				t.Fatalf("o-1 with other quantities: %s replayed %v, %v; want the first decision replayed", statuses(got), got.Replayed, err)
			}
			if _, err := store.Cancel(ctx, "o-2", "A", nil); err != nil {
				t.Fatal(err)
			}
			outs, err := store.ReserveBatch(ctx, []inventory.Order{single}, 0)
			if err != nil || outs[0].Status != order.StatusCancelled || !outs[0].Replayed {
				t.Fatalf("o-2 redelivered after its cancel: %+v, %v; want the cancellation replayed", outs, err)
			}
		})
	}
}

// A stock field HINCRBY would refuse (out of the int64 range, a leading zero) fails every script at its
// checks, before any line is written, not after the first lines' increments.
func TestAnOutOfRangeStockFieldWritesNothing(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 10, "B": 10})
			if _, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), nil); err != nil {
				t.Fatal(err)
			}
			for _, bad := range []string{"99999999999999999999", "007"} {
				rdb.HSet(ctx, "stock:{B}", "available", bad)
				if _, err := store.ReserveLines(ctx, "o-2", lines("A", 1, "B", 1), nil); !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("basket with B available %s: %v, want ErrCorrupt", bad, err)
				}
				if _, err := store.Cancel(ctx, "o-1", "A", nil); !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("cancel with B available %s: %v, want ErrCorrupt", bad, err)
				}
				if _, err := store.Restock(ctx, "B", 1); !errors.Is(err, inventory.ErrCorrupt) {
					t.Errorf("restock of B available %s: %v, want ErrCorrupt", bad, err)
				}
				checkStock(t, store, map[string][2]int64{"A": {9, 1}})
				if n := rdb.Exists(ctx, "order:{A}:o-2").Val(); n != 0 {
					t.Fatalf("available %s: the refused basket wrote its line A", bad)
				}
			}
		})
	}
}

// A cancel or fulfil gives its records a full outcome TTL from then: its redelivery must find them as
// long as a reservation's would, however old the reservation was.
func TestATransitionRenewsTheRecordTTL(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb, inventory.WithOutcomeTTL(time.Hour))
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	if _, err := store.ReserveLines(ctx, "o-1", lines("A", 1, "B", 1), nil); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, "order:{A}:o-1", time.Second) // the reservation is nearly as old as the TTL
	rdb.PExpire(ctx, "order:{B}:o-1", time.Second)
	if _, err := store.Cancel(ctx, "o-1", "B", nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"order:{A}:o-1", "order:{B}:o-1"} {
		if ttl := rdb.PTTL(ctx, key).Val(); ttl < 59*time.Minute {
			t.Errorf("%s: TTL %v after the cancel, want about an hour", key, ttl)
		}
	}
}

// A cancel that comes before its order is remembered: its outcome is cancelled (cancelled_early), and the
// order, when it comes, reserves nothing: a single-SKU order replays the cancellation, a basket is cancelled
// whole, whichever of its SKUs the cancel named; a fulfil then finds it cancelled, a second cancel replays.
func TestACancelBeforeItsOrderIsRemembered(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range linesStores(t) {
		t.Run(name, func(t *testing.T) {
			store := inventory.New(rdb)
			seed(t, store, map[string]int64{"A": 10, "B": 10, "C": 10})
			for _, c := range []struct{ id, sku string }{{"o-1", "A"}, {"o-2", "B"}, {"o-3", "C"}} {
				got, err := store.Cancel(ctx, c.id, c.sku, nil)
				if err != nil || got.Status != order.StatusCancelled || got.Reason != order.ReasonCancelledEarly || got.Replayed {
					t.Fatalf("early cancel of %s: %+v, %v", c.id, got, err)
				}
			}
			if got, err := store.Cancel(ctx, "o-1", "A", nil); err != nil || got.Status != order.StatusCancelled || !got.Replayed {
				t.Fatalf("second early cancel: %+v, %v; want the first replayed", got, err)
			}
			outs, err := store.ReserveBatch(ctx, []inventory.Order{{ID: "o-1", SKU: "A", Quantity: 2}}, 0)
			if err != nil || outs[0].Status != order.StatusCancelled || outs[0].Reason != order.ReasonCancelledEarly {
				t.Fatalf("o-1 after its cancel: %+v, %v; want cancelled", outs, err)
			}
			for _, id := range []string{"o-2", "o-3"} { // the cancel named the basket's first SKU, then its last
				got, err := store.ReserveLines(ctx, id, lines("A", 1, "B", 2, "C", 3), nil)
				if err != nil || statuses(got) != "cancelled//: A=cancelled/ B=cancelled/ C=cancelled/" {
					t.Fatalf("%s after its cancel: %s, %v; want all cancelled", id, statuses(got), err)
				}
				if again, err := store.ReserveLines(ctx, id, lines("A", 1, "B", 2, "C", 3), nil); err != nil || !again.Replayed || again.Status != order.StatusCancelled {
					t.Fatalf("%s redelivered: %s replayed %v, %v", id, statuses(again), again.Replayed, err)
				}
				if ls, err := store.Lines(ctx, id, "C"); err != nil || len(ls) != 3 {
					t.Fatalf("Lines(%s, C) = %v, %v; want the basket's three lines", id, ls, err)
				}
				if got, err := store.Fulfil(ctx, id, "B", nil); err != nil || got.Reason != order.ReasonAlreadyCancelled {
					t.Fatalf("fulfil of %s: %s, %v; want already_cancelled", id, statuses(got), err)
				}
			}
			if got, err := store.Fulfil(ctx, "o-9", "A", nil); err != nil || got.Reason != order.ReasonUnknownOrder {
				t.Fatalf("fulfil of an unknown order: %s, %v", statuses(got), err)
			}
			checkStock(t, store, map[string][2]int64{"A": {10, 0}, "B": {10, 0}, "C": {10, 0}})
		})
	}
}

// A fulfil of an order whose cancel came before it is refused already_cancelled, as the README says (it
// was unknown_order), whether the order came since or not, and changes nothing.
func TestAFulfilAfterAnEarlyCancelIsAlreadyCancelled(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10})
	for _, id := range []string{"o-1", "o-2"} {
		if got, err := store.Cancel(ctx, id, "A", nil); err != nil || got.Reason != order.ReasonCancelledEarly {
			t.Fatalf("early cancel of %s: %s, %v", id, statuses(got), err)
		}
	}
	if got, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "A", Quantity: 2}, 0); err != nil || got.Status != order.StatusCancelled {
		t.Fatalf("o-1 after its cancel: %+v, %v; want cancelled", got, err)
	}
	for _, id := range []string{"o-1", "o-2"} { // o-1 came after its cancel, o-2 has not come yet
		before := rdb.Get(ctx, "order:{A}:"+id).Val()
		got, err := store.Fulfil(ctx, id, "A", nil)
		if err != nil || got.Status != order.StatusRejected || got.Reason != order.ReasonAlreadyCancelled {
			t.Fatalf("fulfil of %s: %s, %v; want rejected already_cancelled", id, statuses(got), err)
		}
		if after := rdb.Get(ctx, "order:{A}:"+id).Val(); after != before {
			t.Fatalf("the fulfil of %s rewrote its record: %s, was %s", id, after, before)
		}
	}
	checkStockFulfilled(t, store, "A", 10, 0)
}

// On one Redis a basket whose line-by-line reservation stopped halfway (line A recorded and taken, B not:
// a store that went line by line crashed) is finished line by line (the script's PARTIAL), not reserved
// again in full: A is taken once.
func TestAHalfReservedBasketOnOneRedisTakesItsFirstLineOnce(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	basket := lines("A", 2, "B", 3)
	reserveUntilCrash(t, rdb, 0, basket)
	checkStock(t, store, map[string][2]int64{"A": {8, 2}, "B": {10, 0}})

	got, err := store.ReserveLines(ctx, "o-1", basket, nil)
	if err != nil || statuses(got) != "reserved//: A=reserved/ B=reserved/" || !got.Lines[0].Replayed || got.Lines[1].Replayed {
		t.Fatalf("the redelivery: %s (lines %+v), %v; want A replayed and B reserved", statuses(got), got.Lines, err)
	}
	checkStock(t, store, map[string][2]int64{"A": {8, 2}, "B": {7, 3}})
}

// A cancel or fulfil reads each record once: the lines it looks up on the way (Lines) are not read again
// for their statuses. On one Redis, once the scripts are known: a single-SKU order's cancel is 2 round
// trips (its record, the transition), a basket's named by its least SKU 3 (that record, the other line's,
// the transition), by another SKU 3 (that record, the least SKU's, the transition).
func TestALifecycleCallReadsEachRecordOnce(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	seed(t, store, map[string]int64{"A": 10, "B": 10})
	for _, id := range []string{"o-0", "o-1", "o-2"} {
		if _, err := store.ReserveLines(ctx, id, lines("A", 1, "B", 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"o-3", "o-4"} {
		if _, err := store.Reserve(ctx, inventory.Order{ID: id, SKU: "A", Quantity: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Cancel(ctx, "o-0", "A", nil); err != nil { // Redis learns the scripts
		t.Fatal(err)
	}
	reads := func() int64 {
		_, rest, _ := strings.Cut(rdb.Info(ctx, "stats").Val(), "total_reads_processed:")
		var n int64
		fmt.Sscan(rest, &n)
		return n
	}
	for _, c := range []struct {
		op, id, sku string
		want        int64
	}{{"cancel", "o-3", "A", 2}, {"fulfil", "o-4", "A", 2}, {"cancel", "o-1", "A", 3}, {"fulfil", "o-2", "B", 3}} {
		before := reads()
		call := store.Cancel
		if c.op == "fulfil" {
			call = store.Fulfil
		}
		if out, err := call(ctx, c.id, c.sku, nil); err != nil || out.Status == order.StatusRejected {
			t.Fatalf("%s %s: %+v, %v", c.op, c.id, out, err)
		}
		if n := reads() - before - 1; n != c.want { // (- 1: the second INFO)
			t.Errorf("%s of %s named by %s: %d round trips, want %d", c.op, c.id, c.sku, n, c.want)
		}
	}
}
