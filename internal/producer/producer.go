// Package producer publishes order events for stockflow workers and, when asked, waits for their outcomes
// and checks that the stock adds up.
package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// Run seeds, publishes and (with Wait) waits and checks; with no Orders it only seeds. Progress goes to
// progress (nil: none).
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A connection per partition blocks reading its outcomes (await), besides the publishers'.
	rdb, err := cfg.Client(cfg.OrdersPartitions + 20)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	r := &run{cfg: cfg, rdb: rdb, parts: cfg.Partitions(), skus: cfg.skus(), progress: progress,
		sum: &Summary{RunID: cfg.RunID, Orders: cfg.Orders, SKUs: map[string]*SKUSummary{}}}
	if err := r.seed(ctx); err != nil {
		return nil, err
	}
	if cfg.Orders == 0 { // seeding only: nothing to wait for, nothing that could not add up
		r.sum.check()
		return r.sum, nil
	}
	from, err := r.prepare(ctx)
	if err != nil {
		return nil, err
	}
	placed, err := r.publish(ctx)
	if err != nil {
		return nil, err
	}
	r.sum.countPublished(placed)
	if !cfg.Wait {
		return r.sum, nil
	}
	return r.sum, r.await(ctx, placed, from)
}

// run is one producer run: its settings, its Redis and the summary it fills in.
type run struct {
	cfg      Config
	rdb      redis.UniversalClient
	parts    []order.Partition
	skus     []string
	progress io.Writer
	sum      *Summary
}

// prepare notes the stock before the run and where its outcomes will start, and makes sure the workers'
// consumer group will see the orders.
func (r *run) prepare(ctx context.Context) ([]outcomeCursor, error) {
	if err := r.readStockBefore(ctx); err != nil {
		return nil, err
	}
	if err := r.cfg.CheckLayout(ctx, r.rdb); err != nil {
		return nil, err
	}
	from, err := r.markOutcomes(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range r.parts {
		if err := ensureGroup(ctx, r.rdb, p.Orders, r.cfg.ConsumerGroup); err != nil {
			return nil, err
		}
	}
	return from, nil
}

// seed sets each SKU's available stock to SeedStock, unless it is negative. Unless Force, it first makes
// sure that no SKU has stock: a load run must not overwrite a stock count that is in use.
func (r *run) seed(ctx context.Context) error {
	if r.cfg.SeedStock < 0 {
		return nil
	}
	if !r.cfg.Force {
		if err := r.refuseStocked(ctx); err != nil {
			return err
		}
	}
	for _, sku := range distinct(r.skus) {
		if err := stock.Set(ctx, r.rdb, sku, int64(r.cfg.SeedStock)); err != nil {
			return fmt.Errorf("seed stock: %w", err)
		}
		r.sum.Seeded++
	}
	return nil
}

// refuseStocked fails, naming them, when some of the SKUs have stock already. A SKU stocked between this
// check and the seeding is overwritten: the check guards against a mistaken run, not a concurrent one.
func (r *run) refuseStocked(ctx context.Context) error {
	var stocked []string
	for _, sku := range distinct(r.skus) {
		_, err := stock.Read(ctx, r.rdb, sku)
		switch {
		case errors.Is(err, stock.ErrUnknownSKU):
		case err != nil:
			return fmt.Errorf("seed stock: %w", err)
		default:
			stocked = append(stocked, sku)
		}
	}
	if len(stocked) == 0 {
		return nil
	}
	const named = 10
	list := strings.Join(stocked[:min(len(stocked), named)], ", ")
	if len(stocked) > named {
		list += fmt.Sprintf(" and %d more", len(stocked)-named)
	}
	return fmt.Errorf("--seed-stock %d would overwrite the stock of %d SKU(s) that have some: %s; "+
		"give --force to overwrite it, or seed other SKUs", r.cfg.SeedStock, len(stocked), list)
}

// readStockBefore records each SKU's stock before the first order.
func (r *run) readStockBefore(ctx context.Context) error {
	for _, sku := range r.skus {
		st, err := r.stock(ctx, sku)
		if err != nil {
			return err
		}
		r.sum.SKUs[sku] = &SKUSummary{Initial: st.Available + st.Reserved, reservedBefore: st.Reserved, fulfilledBefore: st.Fulfilled}
	}
	return nil
}

// await collects the outcomes of the placed events, then checks the stock against them.
func (r *run) await(ctx context.Context, placed map[eventKey]placedOrder, from []outcomeCursor) error {
	c := newCollector(r.cfg, r.sum, placed, newBar(r.progress, "outcomes", len(placed)))
	c.from = from
	c.collect(ctx, r.rdb)
	return r.checkStock(ctx)
}

// checkStock records each SKU's stock after the outcomes and checks that it adds up.
func (r *run) checkStock(ctx context.Context) error {
	for sku, s := range r.sum.SKUs {
		st, err := r.stock(ctx, sku)
		if err != nil {
			return err
		}
		s.Available, s.Reserved, s.Fulfilled = st.Available, st.Reserved, st.Fulfilled
	}
	r.sum.check()
	return nil
}

// stock reads a SKU's stock; a SKU that was never set has none. It runs no script: the producer's Redis
// user (deploy/users.acl) may not.
func (r *run) stock(ctx context.Context, sku string) (stock.Stock, error) {
	st, err := stock.Read(ctx, r.rdb, sku)
	if errors.Is(err, stock.ErrUnknownSKU) {
		return st, nil
	}
	return st, err
}

// outcomeCursor is the ID of the last entry read from a partition's results and poison streams.
type outcomeCursor struct{ results, poison string }

// markOutcomes returns where this run's outcomes will start in each partition: after the entries its
// streams already hold.
func (r *run) markOutcomes(ctx context.Context) ([]outcomeCursor, error) {
	from := make([]outcomeCursor, len(r.parts))
	for i, p := range r.parts {
		var err error
		if from[i].results, err = lastID(ctx, r.rdb, p.Results); err != nil {
			return nil, err
		}
		if from[i].poison, err = lastID(ctx, r.rdb, p.Poison); err != nil {
			return nil, err
		}
	}
	return from, nil
}

// ensureGroup creates the workers' consumer group at the end of an empty (or missing) orders stream, so
// that the orders about to be published reach workers that start later (a new group starts at $ by
// default and would skip them). A stream that already holds entries is left to the workers: they decide
// by CONSUMER_GROUP_START whether those entries are processed.
func ensureGroup(ctx context.Context, rdb redis.UniversalClient, orders, group string) error {
	n, err := rdb.XLen(ctx, orders).Result()
	if err != nil || n > 0 {
		return err
	}
	err = rdb.XGroupCreateMkStream(ctx, orders, group, "$").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create consumer group %s of stream %s: %w", group, orders, err)
	}
	return nil
}

// lastID is the ID of the newest entry of a stream, "0-0" when it has none.
func lastID(ctx context.Context, rdb redis.UniversalClient, name string) (string, error) {
	last, err := rdb.XRevRangeN(ctx, name, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if len(last) == 0 {
		return "0-0", nil
	}
	return last[0].ID, nil
}
