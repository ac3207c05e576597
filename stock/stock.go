// Package stock is a SKU's stock as Redis holds it, for the processes that set and read it without
// deciding orders (the producer; a dashboard, whose Redis user may not run scripts): the hash stock:{SKU}
// (Key) and its fields (Stock), read with one HMGET (Read), and the write of its available count (Set),
// safe to resend. The engine, package inventory, decides orders with scripts of its own on the same hash,
// and sets it with Set's script (SetScript) when it must wait for replica acks.
package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
)

// MaxStock is the most a SKU may hold available: 10^15, well inside the integers that Lua's float64
// numbers compare exactly.
const MaxStock = 1_000_000_000_000_000

// LatchTTL is how long the latch of a stock write (LatchKey) remembers that the write ran: far longer than
// go-redis takes to resend a command whose reply was lost (MaxRetries, 3 by default, each attempt bounded
// by the client's timeouts), short enough that latches do not pile up.
const LatchTTL = time.Minute

// ErrUnknownSKU means the SKU was never stocked.
var ErrUnknownSKU = errors.New("stock: unknown sku")

// Stock is a SKU's stock hash. Its JSON field names are the hash's.
type Stock struct {
	Available int64 `json:"available"`
	Reserved  int64 `json:"reserved"`
	Fence     int64 `json:"fence"`
	// Fulfilled is what fulfilled orders took out of the stock for good: available + reserved + fulfilled
	// is what was stocked.
	Fulfilled int64 `json:"fulfilled"`
}

// Key is the Redis key of a SKU's stock hash ("stock:{SKU}"); every key of a SKU shares its hash tag, so
// the scripts touching them run in one Redis Cluster slot.
func Key(sku string) string { return "stock:{" + sku + "}" }

// LatchKey names the latch of one stock write of sku ("stock:{SKU}:latch:<request id>"): a request id of
// its own, in the SKU's slot.
func LatchKey(sku string) string { return Key(sku) + ":latch:" + uuid.NewString() }

//go:embed set.lua
var setSrc string

// SetScript is the script of Set, for a caller that runs it its own way (package inventory waits for
// replica acks after it): KEYS Key(sku), LatchKey(sku); ARGV available, LatchTTL in milliseconds, and 1
// when a resend must write the latch again (for the replicas), else 0.
var SetScript = redis.NewScript(setSrc)

// Set sets the available stock of sku to available (0..MaxStock), creating the SKU with reserved 0 if it
// does not exist. The reserved count and the fence stay as they are: reservations already made are not
// undone by a stock count. The call is safe to resend (a request id and a latch): go-redis's resend after
// a lost reply does not set available again over the reservations made since. Bad arguments wrap
// order.ErrInvalid, and nothing is written. On a Redis Cluster whose slot of the SKU is being moved, Set
// fails with the server's TRYAGAIN or ASK error where inventory.Store.SetStock retries for a while: call it
// again.
func Set(ctx context.Context, rdb redis.Scripter, sku string, available int64) error {
	if err := checkWrite(sku, available); err != nil {
		return err
	}
	keys := []string{Key(sku), LatchKey(sku)}
	if err := SetScript.Run(ctx, rdb, keys, available, LatchTTL.Milliseconds(), 0).Err(); err != nil {
		return fmt.Errorf("stock: set stock of sku %q: %w", sku, err)
	}
	return nil
}

// checkWrite checks Set's arguments before any Redis call: the SKU, and available within 0..MaxStock. A
// bad one wraps order.ErrInvalid.
func checkWrite(sku string, available int64) error {
	if err := order.ValidateSKU(sku); err != nil {
		return err
	}
	if available < 0 || available > MaxStock {
		return fmt.Errorf("%w available %d: want 0-%d", order.ErrInvalid, available, int64(MaxStock))
	}
	return nil
}

// Read returns the stock of sku with one HMGET, or an error wrapping ErrUnknownSKU if it was never
// stocked. It runs no script: a Redis user that may not (the producer's in deploy/users.acl) can read
// the stock, and one command is as atomic as a script.
func Read(ctx context.Context, rdb redis.HashCmdable, sku string) (Stock, error) {
	if err := order.ValidateSKU(sku); err != nil {
		return Stock{}, err
	}
	reply, err := rdb.HMGet(ctx, Key(sku), fields[:]...).Result()
	if err != nil {
		return Stock{}, fmt.Errorf("stock: get sku %q: %w", sku, err)
	}
	return Decode(sku, reply)
}

// fields are the fields of the stock hash that Read reads and Decode decodes, in this order.
var fields = [...]string{"available", "reserved", "fence", "fulfilled"}

// Decode reads the stock from the reply of an HMGET of its fields available, reserved, fence and
// fulfilled, in this order, each a string or nil when missing (as inventory's get_stock.lua returns them
// too). A missing available count means the SKU was never stocked (ErrUnknownSKU); any other missing
// field reads as 0.
func Decode(sku string, reply []any) (Stock, error) {
	if len(reply) != len(fields) {
		return Stock{}, fmt.Errorf("stock: get sku %q: unexpected reply %v", sku, reply)
	}
	if reply[0] == nil {
		return Stock{}, fmt.Errorf("%w %q", ErrUnknownSKU, sku)
	}
	var st Stock
	for i, dst := range []*int64{&st.Available, &st.Reserved, &st.Fence, &st.Fulfilled} {
		n, err := field(reply[i])
		if err != nil {
			return Stock{}, fmt.Errorf("stock: get sku %q: stock field %s: %w", sku, fields[i], err)
		}
		*dst = n
	}
	return st, nil
}

// field is one field of the stock hash; a missing one reads as 0.
func field(v any) (int64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case string:
		if v == "" {
			return 0, nil
		}
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("%v is not a string", v)
}
