package stock_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Set creates a SKU with nothing reserved and Read reads it back with one HMGET; a SKU never set is
// ErrUnknownSKU; a count already reserved against stays as it is.
func TestSetThenRead(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	if _, err := stock.Read(ctx, rdb, "A"); !errors.Is(err, stock.ErrUnknownSKU) {
		t.Fatalf("Read of a SKU never set: %v; want ErrUnknownSKU", err)
	}
	if err := stock.Set(ctx, rdb, "A", 10); err != nil {
		t.Fatal(err)
	}
	if got, err := stock.Read(ctx, rdb, "A"); err != nil || got != (stock.Stock{Available: 10}) {
		t.Fatalf("Read = %+v, %v; want available 10, the rest 0", got, err)
	}
	if h := rdb.HGetAll(ctx, stock.Key("A")).Val(); !maps.Equal(h, map[string]string{"available": "10", "reserved": "0"}) {
		t.Fatalf("the new SKU's hash is %v; want available 10 and reserved 0", h)
	}
	rdb.HSet(ctx, stock.Key("A"), "reserved", 4, "fence", 7, "fulfilled", 2)
	if err := stock.Set(ctx, rdb, "A", 20); err != nil {
		t.Fatal(err)
	}
	want := stock.Stock{Available: 20, Reserved: 4, Fence: 7, Fulfilled: 2}
	if got, err := stock.Read(ctx, rdb, "A"); err != nil || got != want {
		t.Fatalf("Read = %+v, %v; want %+v: a count leaves the reservations, the fence and the fulfilled as they are", got, err, want)
	}
}

// A bad SKU or count is order.ErrInvalid, and nothing is written.
func TestBadInputIsRefused(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	for _, tc := range []struct {
		sku string
		n   int64
	}{{"", 1}, {"A B", 1}, {"A", -1}, {"A", stock.MaxStock + 1}} {
		if err := stock.Set(ctx, rdb, tc.sku, tc.n); !errors.Is(err, order.ErrInvalid) {
			t.Errorf("Set(%q, %d) = %v; want order.ErrInvalid", tc.sku, tc.n, err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("the refused writes left %d keys", n)
	}
}

// A stock hash whose field is not an integer reads as an error that names the field, never as a zero or
// an unknown SKU; a bad SKU is order.ErrInvalid.
func TestACorruptStockIsAnError(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	for _, field := range []string{"available", "reserved", "fence", "fulfilled"} {
		sku := "SKU-" + field
		rdb.HSet(ctx, stock.Key(sku), "available", 1)
		rdb.HSet(ctx, stock.Key(sku), field, "many")
		_, err := stock.Read(ctx, rdb, sku)
		if err == nil || !strings.Contains(err.Error(), "field "+field) || errors.Is(err, stock.ErrUnknownSKU) {
			t.Errorf("Read with %s corrupt: %v; want an error naming the field", field, err)
		}
	}
	if _, err := stock.Read(ctx, rdb, "a b"); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("Read of an invalid SKU: %v; want order.ErrInvalid", err)
	}
}

// A count whose reply is lost does not set available again over a reservation made before go-redis's
// resend: the resend finds its latch. (A plain HSET resent would hand out the reserved units twice.)
func TestAResentCountKeepsTheReservationsMadeMeanwhile(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	direct := srv.Client()
	if err := stock.Set(ctx, direct, "A", 10); err != nil { // loads the script: the lost reply is of a run
		t.Fatal(err)
	}
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	resending := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // go-redis's default: 3 retries
	t.Cleanup(func() { _ = resending.Close() })
	proxy.DropReplyThen(stock.SetScript.Hash(), 1, func() { // a reservation of 3, before the resend
		direct.HIncrBy(ctx, stock.Key("A"), "available", -3)
		direct.HIncrBy(ctx, stock.Key("A"), "reserved", 3)
	})
	if err := stock.Set(ctx, resending, "A", 50); err != nil || proxy.Dropped() != 1 {
		t.Fatalf("Set: %v, %d replies lost; want nil and 1", err, proxy.Dropped())
	}
	want := stock.Stock{Available: 47, Reserved: 3}
	if got, err := stock.Read(ctx, direct, "A"); err != nil || got != want {
		t.Fatalf("stock %+v, %v; want %+v (the count, then the reservation)", got, err, want)
	}
}
