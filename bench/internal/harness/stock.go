package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
)

// stockSKU is the one SKU every strategy sells.
const stockSKU = "SKU-BENCH"

// stockStrategy is one way to sell a unit of stock. order places order i of one unit from app server s.
type stockStrategy struct {
	name string
	// safe strategies must sell exactly the stock; the naive one must be caught overselling.
	safe  bool
	order func(ctx context.Context, s, i int) (sold bool, retries int, err error)
	// left reads the units left after the run.
	left func(ctx context.Context) (int64, error)
	// seed sets the stock before a run.
	seed func(ctx context.Context, units int) error
}

const plainStockKey = "bench:stock:{" + stockSKU + "}"

// stockStrategies returns the four strategies over clients (one per simulated app server) and lockers
// (one stockflow locker per app server, for the lock strategy).
func stockStrategies(clients []*redis.Client, lockers []*lockmw.Reentrant) []stockStrategy {
	plainSeed := func(ctx context.Context, units int) error {
		return clients[0].Set(ctx, plainStockKey, units, 0).Err()
	}
	plainLeft := func(ctx context.Context) (int64, error) { return clients[0].Get(ctx, plainStockKey).Int64() }
	// getSet is the read-check-write every non-atomic strategy does.
	getSet := func(ctx context.Context, rdb redis.Cmdable) (bool, error) {
		n, err := rdb.Get(ctx, plainStockKey).Int64()
		if err != nil || n < 1 {
			return false, err
		}
		return true, rdb.Set(ctx, plainStockKey, n-1, 0).Err()
	}
	stores := make([]*inventory.Store, len(clients))
	for i, c := range clients {
		stores[i] = inventory.New(c)
	}
	return []stockStrategy{
		{name: "naive GET/SET", seed: plainSeed, left: plainLeft,
			order: func(ctx context.Context, s, _ int) (bool, int, error) {
				sold, err := getSet(ctx, clients[s])
				return sold, 0, err
			}},
		{name: "WATCH/MULTI/EXEC retry", safe: true, seed: plainSeed, left: plainLeft,
			order: func(ctx context.Context, s, _ int) (bool, int, error) {
				for retries := 0; ; retries++ {
					var sold bool
					err := clients[s].Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, plainStockKey).Int64()
						if err != nil || n < 1 {
							sold = false
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, plainStockKey, n-1, 0)
							return nil
						})
						sold = err == nil
						return err
					}, plainStockKey)
					if !errors.Is(err, redis.TxFailedErr) {
						return sold, retries, err
					}
				}
			}},
		{name: "stockflow lock + GET/SET", safe: true, seed: plainSeed, left: plainLeft,
			order: func(ctx context.Context, s, _ int) (bool, int, error) {
				lease, err := lockers[s].Acquire(ctx, stockSKU)
				if err != nil {
					return false, 0, err
				}
				sold, err := getSet(ctx, clients[s])
				return sold, 0, errors.Join(err, lease.Release(context.WithoutCancel(ctx)))
			}},
		{name: "atomic script", safe: true, // inventory.Store.Reserve
			seed: func(ctx context.Context, units int) error { return stores[0].SetStock(ctx, stockSKU, int64(units)) },
			left: func(ctx context.Context) (int64, error) {
				st, err := stores[0].Get(ctx, stockSKU)
				return st.Available, err
			},
			order: func(ctx context.Context, s, i int) (bool, int, error) {
				o, err := stores[s].Reserve(ctx, "o-"+strconv.Itoa(i), stockSKU, 1, 0)
				return o.Status == inventory.StatusReserved, 0, err
			}},
	}
}

// stockRun is the outcome of selling orders units against units of stock.
type stockRun struct {
	sold, rejected, retries, errors int
	firstErr                        error
	elapsed                         time.Duration
	left                            int64
}

func (b *bench) sellOut(ctx context.Context, st stockStrategy, servers int) (stockRun, error) {
	var r stockRun
	if err := b.main.FlushDB(ctx).Err(); err != nil {
		return r, err
	}
	if err := st.seed(ctx, b.cfg.StockUnits); err != nil {
		return r, err
	}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for s := range servers {
		for range b.cfg.StockClients / servers {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i > b.cfg.StockOrders {
						return
					}
					sold, retries, err := st.order(ctx, s, i)
					mu.Lock()
					switch {
					case err != nil:
						r.errors++
						r.firstErr = cmpOr(r.firstErr, err)
					case sold:
						r.sold++
					default:
						r.rejected++
					}
					r.retries += retries
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	left, err := st.left(ctx)
	r.left = left
	return r, err
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// stock is comparison 4: sell StockUnits units to StockOrders concurrent orders of one unit.
func (b *bench) stock(ctx context.Context) error {
	const servers = 4 // simulated app servers, each with its own client (and locker)
	t := &Table{
		ID:    "stock",
		Title: fmt.Sprintf("4. stock strategies, %d units, %d concurrent orders of 1 unit", b.cfg.StockUnits, b.cfg.StockOrders),
		Setup: fmt.Sprintf("one SKU; %d clients (%d app servers x %d goroutines, a Redis client each server)",
			b.cfg.StockClients, servers, b.cfg.StockClients/servers),
		Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "sold", Header: "sold"},
			{Key: "oversold", Header: "oversold units"}, {Key: "left", Header: "units left"}, {Key: "retries", Header: "retries"}},
		RatioOf: "orders_per_s", RatioBase: "atomic script",
	}
	b.report.Tables = append(b.report.Tables, t)
	clients := make([]*redis.Client, servers)
	lockers := make([]*lockmw.Reentrant, servers)
	for s := range servers {
		clients[s] = newClient(b.mainAddr)
		defer clients[s].Close()
		l, err := lockmw.NewReentrant(clients[s], lockmw.Config{})
		if err != nil {
			return err
		}
		defer l.Close()
		lockers[s] = l
	}
	strategies := stockStrategies(clients, lockers)
	return interleave(b.cfg.Rounds, len(strategies), func(round, i int) error {
		st := strategies[i]
		r, err := b.sellOut(ctx, st, servers)
		if err != nil {
			return fmt.Errorf("stock %s: %w", st.name, err)
		}
		oversold := max(0, r.sold-b.cfg.StockUnits)
		perSec := float64(b.cfg.StockOrders) / r.elapsed.Seconds()
		t.add(st.name, map[string]float64{"orders_per_s": perSec, "sold": float64(r.sold),
			"oversold": float64(oversold), "left": float64(r.left), "retries": float64(r.retries)})
		b.progress("stock round %d/%d %-28s %8.0f orders/s  sold %d  oversold %d  left %d  retries %d",
			round+1, b.cfg.Rounds, st.name, perSec, r.sold, oversold, r.left, r.retries)
		name := "stock " + st.name
		b.checks.expect(name+": no errors", r.errors == 0, "%d errors, e.g. %v", r.errors, r.firstErr)
		if st.safe {
			b.checks.expect(name+": sells exactly the stock", r.sold == b.cfg.StockUnits && r.left == 0 &&
				r.sold+r.rejected == b.cfg.StockOrders,
				"round %d: sold %d, rejected %d, %d units left of %d", round+1, r.sold, r.rejected, r.left, b.cfg.StockUnits)
		} else {
			b.checks.expect(name+": oversells (the check can tell safe from unsafe)", oversold > 0,
				"round %d: sold %d of %d units without overselling: the run cannot show the race", round+1, r.sold, b.cfg.StockUnits)
		}
		return nil
	})
}
