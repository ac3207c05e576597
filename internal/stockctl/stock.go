package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// skuStock is the stock of one SKU (stock:{SKU}); Found is false for a SKU that was never stocked.
type skuStock struct {
	SKU       string `json:"sku"`
	Found     bool   `json:"found"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Fulfilled int64  `json:"fulfilled"`
	Fence     int64  `json:"fence"`
}

type stockReport struct {
	SKUs []skuStock `json:"skus"`
	// More: a listing (stock without SKUs) stopped at --limit SKUs; there are others.
	More bool `json:"more,omitempty"`
}

func (r stockReport) writeText(w io.Writer) {
	found, unknown := r.byFound()
	tw := table(w)
	fmt.Fprintln(tw, "SKU\tAVAILABLE\tRESERVED\tFULFILLED\tFENCE")
	for _, s := range found {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", s.SKU, s.Available, s.Reserved, s.Fulfilled, s.Fence)
	}
	_ = tw.Flush()
	for _, sku := range unknown {
		fmt.Fprintf(w, "%s: unknown SKU (never stocked)\n", sku)
	}
	if r.More {
		fmt.Fprintf(w, "showing %d SKUs (--limit); there are more\n", len(r.SKUs))
	}
}

// byFound splits the SKUs into those stocked and the names of those never stocked.
func (r stockReport) byFound() (found []skuStock, unknown []string) {
	for _, s := range r.SKUs {
		if s.Found {
			found = append(found, s)
		} else {
			unknown = append(unknown, s.SKU)
		}
	}
	return found, unknown
}

// runStock shows the stock of each SKU given, or lists the SKUs stocked.
func runStock(ctx context.Context, a *app, args []string) (report, error) {
	if len(args) > 0 {
		return runStockGet(ctx, a, args)
	}
	skus, more, err := a.stockedSKUs(ctx)
	if err != nil {
		return nil, err
	}
	stocks, err := mapEach(ctx, skus, a.readStock)
	return stockReport{SKUs: stocks, More: more}, err
}

// stockedSKUs finds the SKUs that have a stock hash (SCAN, on each master of a cluster), sorted, at most
// --limit of them; more reports that there are others.
func (a *app) stockedSKUs(ctx context.Context) (skus []string, more bool, err error) {
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, stock.Key("*"), 1000).Iterator()
		for iter.Next(ctx) {
			sku, ok := strings.CutSuffix(strings.TrimPrefix(iter.Val(), "stock:{"), "}")
			mu.Lock()
			if ok && stock.Key(sku) == iter.Val() {
				skus = append(skus, sku)
			}
			done := len(skus) > a.opts.limit
			mu.Unlock()
			if done {
				break
			}
		}
		return iter.Err()
	}
	switch c := a.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	slices.Sort(skus)
	if len(skus) > a.opts.limit {
		skus, more = skus[:a.opts.limit], true
	}
	return skus, more, err
}

// runStockGet shows the stock of each SKU; unknown ones are listed as such and end in ExitNotFound.
func runStockGet(ctx context.Context, a *app, args []string) (report, error) {
	if err := skuList(args); err != nil {
		return nil, err
	}
	stocks, err := mapEach(ctx, args, a.readStock)
	if err != nil {
		return nil, err
	}
	r := stockReport{SKUs: stocks}
	_, unknown := r.byFound()
	return r, missing("unknown SKU (never stocked)", unknown)
}

// skuList checks the SKU... arguments of stock before any call, so a typo in the list reads nothing.
func skuList(args []string) error {
	if len(args) == 0 {
		return usageError("stock wants at least one SKU")
	}
	return checkSKUs(args...)
}

// checkSKUs refuses an invalid SKU as a usage error.
func checkSKUs(skus ...string) error {
	for _, sku := range skus {
		if err := order.ValidateSKU(sku); err != nil {
			return config.Usage(err)
		}
	}
	return nil
}

func (a *app) readStock(ctx context.Context, sku string) (skuStock, error) {
	st, err := a.store.Get(ctx, sku)
	switch {
	case errors.Is(err, stock.ErrUnknownSKU):
		return skuStock{SKU: sku}, nil
	case err != nil:
		return skuStock{}, err
	}
	return skuStock{SKU: sku, Found: true, Available: st.Available, Reserved: st.Reserved,
		Fulfilled: st.Fulfilled, Fence: st.Fence}, nil
}

// runStockSet sets the available stock of a SKU (inventory SetStock).
func runStockSet(ctx context.Context, a *app, args []string) (report, error) {
	return a.writeStock(ctx, "stock set", args, func(sku string, n int64) error {
		return a.store.SetStock(ctx, sku, n)
	})
}

// runStockAdd adds to the available stock of a SKU (inventory Restock).
func runStockAdd(ctx context.Context, a *app, args []string) (report, error) {
	return a.writeStock(ctx, "stock add", args, func(sku string, n int64) error {
		_, err := a.store.Restock(ctx, sku, n)
		return err
	})
}

// writeStock runs write with the SKU N arguments of cmd and then shows the stock of the SKU, as stock does.
func (a *app) writeStock(ctx context.Context, cmd string, args []string, write func(sku string, n int64) error) (report, error) {
	sku, n, err := skuAndNumber(cmd, args)
	if err != nil {
		return nil, err
	}
	if err := write(sku, n); err != nil {
		return nil, invalidAsUsage(cmd, err)
	}
	st, err := a.readStock(ctx, sku)
	if err != nil {
		return nil, err
	}
	return stockReport{SKUs: []skuStock{st}}, nil
}

// skuAndNumber reads the SKU N arguments of stock set and stock add, checked before anything is written.
func skuAndNumber(cmd string, args []string) (string, int64, error) {
	if len(args) != 2 {
		return "", 0, usageError(fmt.Sprintf("%s wants SKU N, got %d argument(s)", cmd, len(args)))
	}
	if err := checkSKUs(args[0]); err != nil {
		return "", 0, err
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
	if errors.Is(err, order.ErrInvalid) {
		return config.Usage(fmt.Errorf("%s: %w", cmd, err))
	}
	return err
}
