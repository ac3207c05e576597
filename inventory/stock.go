package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
)

var (
	//go:embed set_stock.lua
	setStockSrc    string
	setStockScript = redis.NewScript(setStockSrc)

	//go:embed restock.lua
	restockSrc    string
	restockScript = stockScript(restockSrc)

	//go:embed get_stock.lua
	getStockSrc    string
	getStockScript = redis.NewScript(getStockSrc)
)

// latchTTL is how long the latch of a stock write (stock:{SKU}:latch:<request id>) remembers that the write
// ran: far longer than go-redis takes to resend a command whose reply was lost (MaxRetries, 3 by default,
// each attempt bounded by the client's timeouts), short enough that latches do not pile up.
const latchTTL = time.Minute

// latchKey names the latch of one stock write of sku: a request id of its own, in the SKU's slot.
func latchKey(sku string) string { return StockKey(sku) + ":latch:" + uuid.NewString() }

// SetStock sets the available stock of sku to available (0..MaxStock), creating the SKU with reserved 0
// if it does not exist. The reserved count and the fence stay as they are: reservations already made
// are not undone by a stock count. The call is safe to resend (a request id and a latch): go-redis's
// resend after a lost reply does not set available again over the reservations made since.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) error {
	if err := checkStockWrite(sku, "available", available, 0); err != nil {
		return err
	}
	keys := []string{StockKey(sku), latchKey(sku)}
	if err := s.eval(ctx, setStockScript, keys, available, latchTTL.Milliseconds(), s.replayWrites()).Err(); err != nil {
		return scriptError("set stock of", "", sku, 0, err)
	}
	return nil
}

// Restock adds quantity (1..MaxStock) to the available stock of sku, creating the SKU if it does not
// exist, and returns the new available count. It fails with order.ErrInvalid, writing nothing, if available
// would exceed MaxStock. go-redis's resend of the call after a lost reply adds nothing again and returns
// the count the first send left (a request id and a latch); a second call adds again.
func (s *Store) Restock(ctx context.Context, sku string, quantity int64) (available int64, err error) {
	if err := checkStockWrite(sku, "quantity", quantity, 1); err != nil {
		return 0, err
	}
	keys := []string{StockKey(sku), latchKey(sku)}
	available, err = s.eval(ctx, restockScript, keys, quantity, int64(MaxStock), latchTTL.Milliseconds(),
		s.replayWrites()).Int64()
	if err != nil {
		return 0, restockError(sku, quantity, err)
	}
	return available, nil
}

// checkStockWrite checks the arguments of a stock write before any Redis call: the SKU, and the number
// n, named field, within lo..MaxStock.
func checkStockWrite(sku, field string, n, lo int64) error {
	if err := order.ValidateSKU(sku); err != nil {
		return err
	}
	return checkRange(field, n, lo, MaxStock)
}

// restockError is order.ErrInvalid for a restock the script refused because it would exceed MaxStock.
func restockError(sku string, quantity int64, err error) error {
	if redis.HasErrorPrefix(err, "OVERSTOCK ") {
		return fmt.Errorf("%w quantity %d: sku %q would exceed %d available", order.ErrInvalid, quantity, sku,
			int64(MaxStock))
	}
	return scriptError("restock", "", sku, 0, err)
}

// Get returns the stock of sku, or an error wrapping ErrUnknownSKU if it was never stocked.
func (s *Store) Get(ctx context.Context, sku string) (Stock, error) {
	if err := order.ValidateSKU(sku); err != nil {
		return Stock{}, err
	}
	reply, err := getStockScript.Run(ctx, s.rdb, []string{StockKey(sku)}).Slice()
	if err != nil {
		return Stock{}, scriptError("get", "", sku, 0, err)
	}
	return decodeStock(sku, reply)
}

// ReadStock returns the stock of sku as Store.Get does, with a plain HMGET instead of a script: for a
// client whose Redis user may not run scripts, as the producer's in deploy/users.acl (a user who may run
// any script may also run one that never ends). One command is as atomic as the script.
func ReadStock(ctx context.Context, rdb redis.HashCmdable, sku string) (Stock, error) {
	if err := order.ValidateSKU(sku); err != nil {
		return Stock{}, err
	}
	reply, err := rdb.HMGet(ctx, StockKey(sku), stockFields[:]...).Result()
	if err != nil {
		return Stock{}, fmt.Errorf("inventory: get sku %q: %w", sku, err)
	}
	return decodeStock(sku, reply)
}

// stockFields are the fields of the stock hash that Get (get_stock.lua) and ReadStock read, in this order.
var stockFields = [...]string{"available", "reserved", "fence", "fulfilled"}

// decodeStock reads the stock fields (stockFields), each nil when missing.
func decodeStock(sku string, reply []any) (Stock, error) {
	if len(reply) != len(stockFields) {
		return Stock{}, fmt.Errorf("inventory: get sku %q: unexpected reply %v", sku, reply)
	}
	if reply[0] == nil {
		return Stock{}, fmt.Errorf("%w %q", ErrUnknownSKU, sku)
	}
	var st Stock
	for i, dst := range []*int64{&st.Available, &st.Reserved, &st.Fence, &st.Fulfilled} {
		n, err := stockField(reply[i])
		if err != nil {
			return Stock{}, fmt.Errorf("inventory: get sku %q: stock field %s: %w", sku, stockFields[i], err)
		}
		*dst = n
	}
	return st, nil
}

// stockField is one field of the stock hash; a missing one reads as 0.
func stockField(v any) (int64, error) {
	s, _ := v.(string)
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

func skuSubject(sku string) string { return fmt.Sprintf("sku %q", sku) }
