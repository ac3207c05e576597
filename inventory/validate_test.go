package inventory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestInvalidInputIsRefusedBeforeRedis(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	keys := dbsize(t, rdb)
	long := strings.Repeat("a", 129)

	reserve := func(order, sku string, q, fence int64) func() error {
		return func() error {
			_, err := store.Reserve(ctx, inventory.Order{ID: order, SKU: sku, Quantity: q}, fence)
			return err
		}
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"an empty sku", reserve("o-1", "", 1, 0), `sku ""`},
		{"a 129-character sku", reserve("o-1", long, 1, 0), `sku "aaaa`},
		{"a sku with a space", reserve("o-1", "a b", 1, 0), `sku "a b"`},
		{"a sku with unicode", reserve("o-1", "SKU-é", 1, 0), `sku "SKU-é"`},
		{"a sku with a brace that would break the hash tag", reserve("o-1", "a}b", 1, 0), `sku "a}b"`},
		{"an empty order id", reserve("", "SKU-1", 1, 0), `order id ""`},
		{"a 129-character order id", reserve(long, "SKU-1", 1, 0), `order id "aaaa`},
		{"an order id with a space", reserve("o 1", "SKU-1", 1, 0), `order id "o 1"`},
		{"an order id with unicode", reserve("o-✓", "SKU-1", 1, 0), `order id "o-✓"`},
		{"quantity 0", reserve("o-1", "SKU-1", 0, 0), "quantity 0"},
		{"quantity -1", reserve("o-1", "SKU-1", -1, 0), "quantity -1"},
		{"quantity 1,000,001", reserve("o-1", "SKU-1", 1_000_001, 0), "quantity 1000001"},
		{"a negative fence", reserve("o-1", "SKU-1", 1, -1), "fence -1"},
		{"a release with an invalid sku", func() error { _, err := store.Release(ctx, "o-1", "a b", 0); return err }, `sku "a b"`},
		{"a release with an invalid order id", func() error { _, err := store.Release(ctx, "", "SKU-1", 0); return err }, `order id ""`},
		{"a stock count below 0", func() error { return store.SetStock(ctx, "SKU-1", -1) }, "available -1"},
		{"a stock count above stock.MaxStock", func() error { return store.SetStock(ctx, "SKU-1", stock.MaxStock+1) }, "available 1000000000000001"},
		{"a restock of 0", func() error { _, err := store.Restock(ctx, "SKU-1", 0); return err }, "quantity 0"},
		{"a stock read with an invalid sku", func() error { _, err := store.Get(ctx, "a b"); return err }, `sku "a b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, order.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), "invalid "+tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
			if n := dbsize(t, rdb); n != keys {
				t.Fatalf("DBSIZE = %d, want %d", n, keys)
			}
		})
	}
	want(t, stockHash(t, rdb, "SKU-1"), map[string]string{"available": "10", "reserved": "0"})
}

func TestValidateMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a space is quoted and the rule stated", order.ValidateSKU("a b"),
			`invalid sku "a b": want 1-128 characters of A-Z a-z 0-9 . _ : -`},
		{"a long value is cut short", order.ValidateOrderID(strings.Repeat("x", 1000)),
			`invalid order id "` + strings.Repeat("x", 40) + `"... (1000 bytes): want 1-128 characters of A-Z a-z 0-9 . _ : -`},
		{"a quantity states its range", order.ValidateQuantity(0), "invalid quantity 0: want 1-1000000"},
		{"the first bad field of an order is named", order.ValidateOrder("o-1", "", 0),
			`invalid sku "": want 1-128 characters of A-Z a-z 0-9 . _ : -`},
		{"all allowed characters pass", order.ValidateOrder("azAZ09._:-", strings.Repeat("S", 128), 1_000_000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if tc.err != nil {
				got = tc.err.Error()
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
