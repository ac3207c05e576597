package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed set_stock.lua
	setStockSrc    string
	setStockScript = redis.NewScript(setStockSrc)

	//go:embed restock.lua
	restockSrc    string
	restockScript = redis.NewScript(restockSrc)

	//go:embed get_stock.lua
	getStockSrc    string
	getStockScript = redis.NewScript(getStockSrc)
)

// SetStock sets the available stock of sku to available (0..MaxStock), creating the SKU with reserved 0
// if it does not exist. The reserved count and the fence stay as they are: reservations already made
// are not undone by a stock count.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) error {
	if err := checkStockWrite(sku, "available", available, 0); err != nil {
		return err
	}
	if err := s.run(ctx, setStockScript, []string{stockKey(sku)}, available).Err(); err != nil {
		return scriptError("set stock of", "", sku, 0, err)
	}
	return nil
}

// Restock adds quantity (1..MaxStock) to the available stock of sku, creating the SKU if it does not
// exist, and returns the new available count. It fails with ErrInvalid, writing nothing, if available
// would exceed MaxStock.
func (s *Store) Restock(ctx context.Context, sku string, quantity int64) (available int64, err error) {
	if err := checkStockWrite(sku, "quantity", quantity, 1); err != nil {
		return 0, err
	}
	available, err = s.run(ctx, restockScript, []string{stockKey(sku)}, quantity, int64(MaxStock)).Int64()
	if err != nil {
		return 0, restockError(sku, quantity, err)
	}
	return available, nil
}

// checkStockWrite checks the arguments of a stock write before any Redis call: the SKU, and the number
// n, named field, within lo..MaxStock.
func checkStockWrite(sku, field string, n, lo int64) error {
	if err := ValidateSKU(sku); err != nil {
		return err
	}
	return checkRange(field, n, lo, MaxStock)
}

// restockError is ErrInvalid for a restock the script refused because it would exceed MaxStock.
func restockError(sku string, quantity int64, err error) error {
	if redis.HasErrorPrefix(err, "OVERSTOCK ") {
		return fmt.Errorf("%w quantity %d: sku %q would exceed %d available", ErrInvalid, quantity, sku,
			int64(MaxStock))
	}
	return scriptError("restock", "", sku, 0, err)
}

// Get returns the stock of sku, or an error wrapping ErrUnknownSKU if it was never stocked.
func (s *Store) Get(ctx context.Context, sku string) (Stock, error) {
	if err := ValidateSKU(sku); err != nil {
		return Stock{}, err
	}
	reply, err := getStockScript.Run(ctx, s.rdb, []string{stockKey(sku)}).Slice()
	if err != nil {
		return Stock{}, scriptError("get", "", sku, 0, err)
	}
	return decodeStock(sku, reply)
}

// decodeStock reads the reply of get_stock.lua: available, reserved, fence and fulfilled, each nil
// when missing.
func decodeStock(sku string, reply []any) (Stock, error) {
	if len(reply) != 4 {
		return Stock{}, fmt.Errorf("inventory: get sku %q: unexpected script reply %v", sku, reply)
	}
	if reply[0] == nil {
		return Stock{}, fmt.Errorf("%w %q", ErrUnknownSKU, sku)
	}
	var st Stock
	names := [...]string{"available", "reserved", "fence", "fulfilled"}
	for i, dst := range []*int64{&st.Available, &st.Reserved, &st.Fence, &st.Fulfilled} {
		n, err := stockField(reply[i])
		if err != nil {
			return Stock{}, fmt.Errorf("inventory: get sku %q: stock field %s: %w", sku, names[i], err)
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
