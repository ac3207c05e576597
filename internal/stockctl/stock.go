package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/stockflow/stockflow/inventory"
)

// skuStock is the stock of one SKU (stock:{SKU}); Found is false for a SKU that was never stocked.
type skuStock struct {
	SKU       string `json:"sku"`
	Found     bool   `json:"found"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Fence     int64  `json:"fence"`
}

type stockReport struct {
	SKUs []skuStock `json:"skus"`
}

func (r stockReport) writeText(w io.Writer) {
	tw := table(w)
	fmt.Fprintln(tw, "SKU\tAVAILABLE\tRESERVED\tFENCE")
	for _, s := range r.SKUs {
		if s.Found {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", s.SKU, s.Available, s.Reserved, s.Fence)
		}
	}
	_ = tw.Flush()
	for _, s := range r.SKUs {
		if !s.Found {
			fmt.Fprintf(w, "%s: unknown SKU (never stocked)\n", s.SKU)
		}
	}
}

// runStockGet shows the stock of each SKU; unknown ones are listed as such and end in ExitNotFound.
func runStockGet(ctx context.Context, a *app, skus []string) error {
	if len(skus) == 0 {
		return usageError("stock wants at least one SKU")
	}
	for _, sku := range skus { // before any call, so a typo in the list reads nothing
		if err := inventory.ValidateSKU(sku); err != nil {
			return asUsage(err)
		}
	}
	var r stockReport
	var unknown []string
	for _, sku := range skus {
		st, err := a.readStock(ctx, sku)
		if err != nil {
			return err
		}
		if !st.Found {
			unknown = append(unknown, sku)
		}
		r.SKUs = append(r.SKUs, st)
	}
	if err := a.emit(r); err != nil {
		return err
	}
	if len(unknown) > 0 {
		return notFound("unknown SKU (never stocked): " + strings.Join(unknown, ", "))
	}
	return nil
}

func (a *app) readStock(ctx context.Context, sku string) (skuStock, error) {
	st, err := a.store.Get(ctx, sku)
	switch {
	case errors.Is(err, inventory.ErrUnknownSKU):
		return skuStock{SKU: sku}, nil
	case err != nil:
		return skuStock{}, err
	}
	return skuStock{SKU: sku, Found: true, Available: st.Available, Reserved: st.Reserved, Fence: st.Fence}, nil
}

// runStockSet sets the available stock of a SKU (inventory SetStock).
func runStockSet(ctx context.Context, a *app, args []string) error {
	sku, n, err := skuAndNumber("stock set", args)
	if err != nil {
		return err
	}
	if err := a.store.SetStock(ctx, sku, n); err != nil {
		return invalidAsUsage("stock set", err)
	}
	return a.emitStock(ctx, sku)
}

// runStockAdd adds to the available stock of a SKU (inventory Restock).
func runStockAdd(ctx context.Context, a *app, args []string) error {
	sku, n, err := skuAndNumber("stock add", args)
	if err != nil {
		return err
	}
	if _, err := a.store.Restock(ctx, sku, n); err != nil {
		return invalidAsUsage("stock add", err)
	}
	return a.emitStock(ctx, sku)
}

// emitStock prints the stock of sku after a write, as stock does.
func (a *app) emitStock(ctx context.Context, sku string) error {
	st, err := a.readStock(ctx, sku)
	if err != nil {
		return err
	}
	return a.emit(stockReport{SKUs: []skuStock{st}})
}

// skuAndNumber reads the SKU N arguments of stock set and stock add, checked before anything is written.
func skuAndNumber(cmd string, args []string) (string, int64, error) {
	if len(args) != 2 {
		return "", 0, usageError(fmt.Sprintf("%s wants SKU N, got %d argument(s)", cmd, len(args)))
	}
	if err := inventory.ValidateSKU(args[0]); err != nil {
		return "", 0, asUsage(err)
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		return "", 0, usageError(fmt.Sprintf("%s: invalid N %q: want a whole number", cmd, args[1]))
	}
	return args[0], n, nil
}

// invalidAsUsage makes an inventory input error (a number out of range, stock over the maximum) a usage
// error; the store checks these before it writes.
func invalidAsUsage(cmd string, err error) error {
	if errors.Is(err, inventory.ErrInvalid) {
		return asUsage(fmt.Errorf("%s: %w", cmd, err))
	}
	return err
}
