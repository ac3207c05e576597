package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
)

// lockHolder is one field of the lock hash: an owner and its reentry count.
type lockHolder struct {
	Owner string `json:"owner"`
	Holds int64  `json:"holds"`
}

// lockNode is the lock and the fencing counter on one Redis (REDIS_URL, or one Redlock master).
type lockNode struct {
	Addr    string       `json:"addr"`
	Holders []lockHolder `json:"holders"`            // empty: the lock is free
	LeaseMS int64        `json:"lease_remaining_ms"` // 0 when free, -1 when held without expiry (stuck)
	Counter *int64       `json:"counter"`            // null: no counter
	// CounterTTLMS is the time the counter has left; null when it has no TTL or does not exist.
	CounterTTLMS *int64 `json:"counter_ttl_ms"`
}

type lockReport struct {
	SKU        string     `json:"sku"`
	LockKey    string     `json:"lock_key"`
	CounterKey string     `json:"counter_key"`
	StockKey   string     `json:"stock_key"`
	StockFound bool       `json:"stock_found"`
	Fence      int64      `json:"fence"` // the fence stored in stock:{SKU}, from REDIS_URL
	Redlock    bool       `json:"redlock"`
	Nodes      []lockNode `json:"nodes"`
	Warnings   []string   `json:"warnings"`
}

// runLock shows the lock of a SKU, its fencing counter (on each Redlock master when REDLOCK_URLS is set)
// and the fence stored with the stock, and warns when the counter fell below the fence.
func runLock(ctx context.Context, a *app, args []string) error {
	if len(args) != 1 {
		return usageError(fmt.Sprintf("lock wants one SKU, got %d argument(s)", len(args)))
	}
	sku := args[0]
	if err := inventory.ValidateSKU(sku); err != nil {
		return asUsage(err)
	}
	lock := "lock:{" + sku + "}"
	r := lockReport{SKU: sku, LockKey: lock, CounterKey: "redisson_lock_token:" + lock, StockKey: "stock:{" + sku + "}",
		Redlock: len(a.masters) > 0, Warnings: []string{}}
	st, err := a.readStock(ctx, sku)
	if err != nil {
		return err
	}
	r.StockFound, r.Fence = st.Found, st.Fence
	if err := r.readNodes(ctx, a.lockClients()); err != nil {
		return err
	}
	r.warn()
	if err := a.emit(r); err != nil {
		return err
	}
	if !r.StockFound && r.empty() {
		return notFound(fmt.Sprintf("nothing known about SKU %q: no stock, lock or fencing counter", sku))
	}
	return nil
}

// lockClients are the Redis servers the locks live on.
func (a *app) lockClients() []*redis.Client {
	if len(a.masters) > 0 {
		return a.masters
	}
	return []*redis.Client{a.rdb}
}

func (r *lockReport) readNodes(ctx context.Context, clients []*redis.Client) error {
	for _, c := range clients {
		n, err := readLockNode(ctx, c, r.LockKey, r.CounterKey)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		r.Nodes = append(r.Nodes, n)
	}
	return nil
}

// readLockNode reads the lock and the counter in one MULTI, so owner, lease and counter are of one moment.
func readLockNode(ctx context.Context, c *redis.Client, lockKey, counterKey string) (lockNode, error) {
	n := lockNode{Addr: c.Options().Addr, Holders: []lockHolder{}}
	pipe := c.TxPipeline()
	holders, lease := pipe.HGetAll(ctx, lockKey), pipe.PTTL(ctx, lockKey)
	counter, counterTTL := pipe.Get(ctx, counterKey), pipe.PTTL(ctx, counterKey)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return n, err
	}
	for owner, count := range holders.Val() {
		holds, _ := strconv.ParseInt(count, 10, 64)
		n.Holders = append(n.Holders, lockHolder{Owner: owner, Holds: holds})
	}
	switch ttl := lease.Val(); {
	case len(n.Holders) == 0:
	case ttl > 0:
		n.LeaseMS = millis(ttl)
	case ttl == -1: // go-redis passes PTTL's "no expiry" through as -1ns
		n.LeaseMS = -1
	}
	if v, err := counter.Result(); err == nil {
		token, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return n, fmt.Errorf("fencing counter %s holds %q, not an integer", counterKey, v)
		}
		n.Counter = &token
	}
	if ttl := counterTTL.Val(); n.Counter != nil && ttl > 0 {
		n.CounterTTLMS = new(millis(ttl))
	}
	return n, nil
}

// warn adds a warning when the next holder would get a token below the stored fence. A Redlock token is
// the highest counter of the majority that answered, so the lowest majority decides.
func (r *lockReport) warn() {
	counters := make([]int64, len(r.Nodes)) // a missing counter starts again at 1
	for i, n := range r.Nodes {
		if n.Counter != nil {
			counters[i] = *n.Counter
		}
	}
	slices.Sort(counters)
	reachable := counters[len(counters)/2] // the highest counter of the lowest majority
	if r.Fence == 0 || reachable >= r.Fence {
		return
	}
	what := "fencing counter"
	if r.Redlock {
		what = "fencing counter on a majority of the masters"
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("%s is %d, below the stored fence %d: the next holder's writes "+
		"will be refused as stale until the counter is raised (a worker raises it after the first refusal)",
		what, reachable, r.Fence))
}

// empty reports that no server holds a lock or a counter for the SKU.
func (r *lockReport) empty() bool {
	for _, n := range r.Nodes {
		if len(n.Holders) > 0 || n.Counter != nil {
			return false
		}
	}
	return true
}

func (r lockReport) writeText(w io.Writer) {
	for _, n := range r.Nodes {
		lease := "lease " + human(n.LeaseMS) + " left"
		if n.LeaseMS < 0 {
			lease = "no lease: it never expires (stuck?)"
		}
		for _, h := range n.Holders {
			fmt.Fprintf(w, "%s on %s: held by %s (holds %d), %s\n", r.LockKey, n.Addr, h.Owner, h.Holds, lease)
		}
		if len(n.Holders) == 0 {
			fmt.Fprintf(w, "%s on %s: free\n", r.LockKey, n.Addr)
		}
		switch {
		case n.Counter == nil:
			fmt.Fprintf(w, "%s on %s: missing (the next acquisition gets token 1)\n", r.CounterKey, n.Addr)
		case n.CounterTTLMS == nil:
			fmt.Fprintf(w, "%s on %s: %d (no TTL)\n", r.CounterKey, n.Addr, *n.Counter)
		default:
			fmt.Fprintf(w, "%s on %s: %d (expires in %s)\n", r.CounterKey, n.Addr, *n.Counter, human(*n.CounterTTLMS))
		}
	}
	if r.StockFound {
		fmt.Fprintf(w, "%s fence: %d\n", r.StockKey, r.Fence)
	} else {
		fmt.Fprintf(w, "%s: does not exist (no stored fence)\n", r.StockKey)
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warning)
	}
}
