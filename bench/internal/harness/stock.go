package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
)

// stockSKU is the one SKU every strategy sells.
const stockSKU = "SKU-BENCH"

// stockServers is the simulated app servers of comparison 4, each with its own client (and locker).
const stockServers = 4

// orderFunc places order i of one unit from app server s.
type orderFunc func(ctx context.Context, s, i int) (sold bool, retries int, err error)

// stockStrategy is one way to sell a unit of stock.
type stockStrategy struct {
	name string
	// safe strategies must sell exactly the stock; the naive one must be caught overselling.
	safe  bool
	order orderFunc
	// left reads the units left after the run.
	left func(ctx context.Context) (int64, error)
	// seed sets the stock before a run.
	seed func(ctx context.Context, units int) error
}

// appServers are the clients (one per simulated app server) and stockflow lockers (one per app server,
// for the lock strategy) the strategies sell from.
type appServers struct {
	clients []*redis.Client
	lockers []*rlock.Reentrant
}

func newAppServers(addr string, n int) (*appServers, error) {
	a := &appServers{}
	for range n {
		c := newClient(addr)
		a.clients = append(a.clients, c)
		l, err := rlock.NewReentrant(c, rlock.Config{})
		if err != nil {
			a.close()
			return nil, err
		}
		a.lockers = append(a.lockers, l)
	}
	return a, nil
}

func (a *appServers) close() {
	for _, l := range a.lockers {
		_ = l.Close()
	}
	closeAll(a.clients)
}

// stockStrategies returns the four strategies, from the least safe to the atomic script.
func (a *appServers) stockStrategies() []stockStrategy {
	plain := plainStock{a.clients[0]}
	return []stockStrategy{
		{name: "naive GET/SET", seed: plain.seed, left: plain.left, order: a.naiveOrder},
		{name: "WATCH/MULTI/EXEC retry", safe: true, seed: plain.seed, left: plain.left, order: a.optimisticOrder},
		{name: "stockflow lock + GET/SET", safe: true, seed: plain.seed, left: plain.left, order: a.lockedOrder},
		a.atomicScript(),
	}
}

const plainStockKey = "bench:stock:{" + stockSKU + "}"

// plainStock is the stock of the non-atomic strategies: a plain integer key.
type plainStock struct{ rdb *redis.Client }

func (p plainStock) seed(ctx context.Context, units int) error {
	return p.rdb.Set(ctx, plainStockKey, units, 0).Err()
}

func (p plainStock) left(ctx context.Context) (int64, error) {
	return p.rdb.Get(ctx, plainStockKey).Int64()
}

// takeUnit is the read-check-write every non-atomic strategy does.
func takeUnit(ctx context.Context, rdb redis.Cmdable) (bool, error) {
	n, err := rdb.Get(ctx, plainStockKey).Int64()
	if err != nil || n < 1 {
		return false, err
	}
	return true, rdb.Set(ctx, plainStockKey, n-1, 0).Err()
}

// naiveOrder takes a unit with no protection at all: it reads the stock, decides (naiveDecide stands for the
// application's work between its read and its write) and writes; concurrent orders oversell. Without the
// pause a loaded machine could run the 16 clients' reads and writes one after another, and the check that
// it oversells (the bench can tell safe from unsafe) would fail for want of a race.
func (a *appServers) naiveOrder(ctx context.Context, s, _ int) (bool, int, error) {
	n, err := a.clients[s].Get(ctx, plainStockKey).Int64()
	if err != nil || n < 1 {
		return false, 0, err
	}
	time.Sleep(naiveDecide)
	return true, 0, a.clients[s].Set(ctx, plainStockKey, n-1, 0).Err()
}

// naiveDecide is the naive strategy's pause between its read and its write.
const naiveDecide = 200 * time.Microsecond

// optimisticOrder takes a unit in WATCH/MULTI/EXEC, again until no other client changed the stock
// in between.
func (a *appServers) optimisticOrder(ctx context.Context, s, _ int) (bool, int, error) {
	for retries := 0; ; retries++ {
		sold, err := watchedTake(ctx, a.clients[s])
		if !errors.Is(err, redis.TxFailedErr) {
			return sold, retries, err
		}
	}
}

// watchedTake takes a unit in one transaction; redis.TxFailedErr when the stock changed after the read.
func watchedTake(ctx context.Context, rdb *redis.Client) (sold bool, err error) {
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, plainStockKey).Int64()
		if err != nil || n < 1 {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, plainStockKey, n-1, 0)
			return nil
		})
		sold = err == nil
		return err
	}, plainStockKey)
	return sold, err
}

// lockedOrder takes a unit under stockflow's lock of the SKU.
func (a *appServers) lockedOrder(ctx context.Context, s, _ int) (bool, int, error) {
	lease, err := a.lockers[s].Acquire(ctx, stockSKU)
	if err != nil {
		return false, 0, err
	}
	sold, err := takeUnit(ctx, a.clients[s])
	return sold, 0, errors.Join(err, lease.Release(context.WithoutCancel(ctx)))
}

// atomicScript is inventory.Store.Reserve: the check and the take in one script.
func (a *appServers) atomicScript() stockStrategy {
	stores := make([]*inventory.Store, len(a.clients))
	for i, c := range a.clients {
		stores[i] = inventory.New(c)
	}
	return stockStrategy{name: "atomic script", safe: true,
		seed: func(ctx context.Context, units int) error { return stores[0].SetStock(ctx, stockSKU, int64(units)) },
		left: func(ctx context.Context) (int64, error) {
			st, err := stores[0].Get(ctx, stockSKU)
			return st.Available, err
		},
		order: func(ctx context.Context, s, i int) (bool, int, error) {
			o, err := stores[s].Reserve(ctx, inventory.Order{ID: "o-" + strconv.Itoa(i), SKU: stockSKU, Quantity: 1}, 0)
			return o.Status == order.StatusReserved, 0, err
		}}
}

// stockRun is the outcome of selling orders units against units of stock.
type stockRun struct {
	sold, rejected, retries, errors int
	firstErr                        error
	elapsed                         time.Duration
	left                            int64
}

func (r *stockRun) note(sold bool, retries int, err error) {
	switch {
	case err != nil:
		r.errors++
		r.firstErr = cmp.Or(r.firstErr, err)
	case sold:
		r.sold++
	default:
		r.rejected++
	}
	r.retries += retries
}

// sellOut sells StockOrders orders of one unit against StockUnits of stock with st, on an emptied Redis.
func (b *bench) sellOut(ctx context.Context, st stockStrategy) (stockRun, error) {
	if err := b.main.FlushDB(ctx).Err(); err != nil {
		return stockRun{}, err
	}
	if err := st.seed(ctx, b.cfg.StockUnits); err != nil {
		return stockRun{}, err
	}
	r := b.placeOrders(ctx, st.order)
	var err error
	r.left, err = st.left(ctx)
	return r, err
}

// placeOrders places the orders from StockClients goroutines spread over the app servers.
func (b *bench) placeOrders(ctx context.Context, order orderFunc) stockRun {
	var next atomic.Int64
	var mu sync.Mutex
	var r stockRun
	start := time.Now()
	fanOut(stockServers, b.cfg.StockClients/stockServers, func(s, _ int) {
		for i := int(next.Add(1)); i <= b.cfg.StockOrders; i = int(next.Add(1)) {
			sold, retries, err := order(ctx, s, i)
			mu.Lock()
			r.note(sold, retries, err)
			mu.Unlock()
		}
	})
	r.elapsed = time.Since(start)
	return r
}

// stock is comparison 4: sell StockUnits units to StockOrders concurrent orders of one unit.
func (b *bench) stock(ctx context.Context) error {
	t := b.addTable(&Table{
		ID:    "stock",
		Title: fmt.Sprintf("4. stock strategies, %d units, %d concurrent orders of 1 unit", b.cfg.StockUnits, b.cfg.StockOrders),
		Setup: fmt.Sprintf("one SKU; %d clients (%d app servers x %d goroutines, a Redis client each server)",
			b.cfg.StockClients, stockServers, b.cfg.StockClients/stockServers),
		Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "sold", Header: "sold"},
			{Key: "oversold", Header: "oversold units"}, {Key: "left", Header: "units left"}, {Key: "retries", Header: "retries"}},
		RatioOf: "orders_per_s", RatioBase: "atomic script",
	})
	servers, err := newAppServers(b.mainAddr, stockServers)
	if err != nil {
		return err
	}
	defer servers.close()
	strategies := servers.stockStrategies()
	return interleave(b.cfg.Rounds, len(strategies), func(round, i int) error {
		return b.stockRound(ctx, t, strategies[i], round)
	})
}

// stockRound sells out with st once and records it.
func (b *bench) stockRound(ctx context.Context, t *Table, st stockStrategy, round int) error {
	r, err := b.sellOut(ctx, st)
	if err != nil {
		return fmt.Errorf("stock %s: %w", st.name, err)
	}
	oversold := max(0, r.sold-b.cfg.StockUnits)
	perSec := float64(b.cfg.StockOrders) / r.elapsed.Seconds()
	t.add(st.name, map[string]float64{"orders_per_s": perSec, "sold": float64(r.sold),
		"oversold": float64(oversold), "left": float64(r.left), "retries": float64(r.retries)})
	b.progress("stock round %d/%d %-28s %8.0f orders/s  sold %d  oversold %d  left %d  retries %d",
		round+1, b.cfg.Rounds, st.name, perSec, r.sold, oversold, r.left, r.retries)
	b.checkStock(st, r, round)
	return nil
}

// checkStock records the checks of one round: no errors; a safe strategy sold exactly the stock, the naive
// one oversold (so the run can tell safe from unsafe).
func (b *bench) checkStock(st stockStrategy, r stockRun, round int) {
	name := "stock " + st.name
	b.checks.expect(name+": no errors", r.errors == 0, "%d errors, e.g. %v", r.errors, r.firstErr)
	if st.safe {
		b.checks.expect(name+": sells exactly the stock", r.sold == b.cfg.StockUnits && r.left == 0 &&
			r.sold+r.rejected == b.cfg.StockOrders,
			"round %d: sold %d, rejected %d, %d units left of %d", round+1, r.sold, r.rejected, r.left, b.cfg.StockUnits)
		return
	}
	oversold := max(0, r.sold-b.cfg.StockUnits)
	b.checks.expect(name+": oversells (the check can tell safe from unsafe)", oversold > 0,
		"round %d: sold %d of %d units without overselling: the run cannot show the race", round+1, r.sold, b.cfg.StockUnits)
}
