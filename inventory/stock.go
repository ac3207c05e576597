package inventory

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

var (
	//go:embed restock.lua
	restockSrc    string
	restockScript = stockScript(restockSrc)

	//go:embed get_stock.lua
	getStockSrc    string
	getStockScript = redis.NewScript(getStockSrc)
)

// SetStock sets the available stock of sku to available (0..stock.MaxStock) as stock.Set does, and with
// replica acks (WithReplicaAcks) waits for them.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) error {
	if err := checkStockWrite(sku, "available", available, 0); err != nil {
		return err
	}
	keys := []string{stock.Key(sku), stock.LatchKey(sku)}
	if err := s.eval(ctx, stock.SetScript, keys, available, stock.LatchTTL.Milliseconds(), s.replayWrites()).Err(); err != nil {
		return scriptError("set stock of", "", sku, 0, err)
	}
	return nil
}

// Restock adds quantity (1..stock.MaxStock) to the available stock of sku, creating the SKU if it does not
// exist, and returns the new available count. It fails with order.ErrInvalid, writing nothing, if available
// would exceed stock.MaxStock. go-redis's resend of the call after a lost reply adds nothing again and returns
// the count the first send left (a request id and a latch); a second call adds again.
func (s *Store) Restock(ctx context.Context, sku string, quantity int64) (available int64, err error) {
	if err := checkStockWrite(sku, "quantity", quantity, 1); err != nil {
		return 0, err
	}
	keys := []string{stock.Key(sku), stock.LatchKey(sku)}
	available, err = s.eval(ctx, restockScript, keys, quantity, int64(stock.MaxStock), stock.LatchTTL.Milliseconds(),
		s.replayWrites()).Int64()
	if err != nil {
		return 0, restockError(sku, quantity, err)
	}
	return available, nil
}

// restockError is order.ErrInvalid for a restock the script refused because it would exceed stock.MaxStock.
func restockError(sku string, quantity int64, err error) error {
	if redis.HasErrorPrefix(err, "OVERSTOCK ") {
		return fmt.Errorf("%w quantity %d: sku %q would exceed %d available", order.ErrInvalid, quantity, sku,
			int64(stock.MaxStock))
	}
	return scriptError("restock", "", sku, 0, err)
}

// Get returns the stock of sku, or an error wrapping stock.ErrUnknownSKU if it was never stocked.
func (s *Store) Get(ctx context.Context, sku string) (stock.Stock, error) {
	if err := order.ValidateSKU(sku); err != nil {
		return stock.Stock{}, err
	}
	reply, err := getStockScript.Run(ctx, s.rdb, []string{stock.Key(sku)}).Slice()
	if err != nil {
		return stock.Stock{}, scriptError("get", "", sku, 0, err)
	}
	return stock.Decode(sku, reply)
}

// checkStockWrite checks the arguments of a stock write before any Redis call: the SKU, and the number
// n, named field, within lo..stock.MaxStock.
func checkStockWrite(sku, field string, n, lo int64) error {
	if err := order.ValidateSKU(sku); err != nil {
		return err
	}
	return checkRange(field, n, lo, stock.MaxStock)
}

func skuSubject(sku string) string { return fmt.Sprintf("sku %q", sku) }
