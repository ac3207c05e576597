package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/stock"
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
func runLock(ctx context.Context, a *app, args []string) (report, error) {
	sku, err := oneSKU(args)
	if err != nil {
		return nil, err
	}
	r, err := a.readLock(ctx, sku)
	if err != nil {
		return nil, err
	}
	return r, r.nothingKnown()
}

// oneSKU checks the SKU argument of lock.
func oneSKU(args []string) (string, error) {
	if len(args) != 1 {
		return "", usageError(fmt.Sprintf("lock wants one SKU, got %d argument(s)", len(args)))
	}
	return args[0], checkSKUs(args[0])
}

// readLock reads the fence stored with the stock of sku, and its lock and counter on each lock server.
func (a *app) readLock(ctx context.Context, sku string) (*lockReport, error) {
	r := &lockReport{SKU: sku, LockKey: rlock.LockKey(sku), CounterKey: rlock.TokenKey(sku), StockKey: stock.Key(sku),
		Redlock: len(a.masters) > 0, Warnings: []string{}}
	st, err := a.readStock(ctx, sku)
	if err != nil {
		return nil, err
	}
	r.StockFound, r.Fence = st.Found, st.Fence
	if err := r.readNodes(ctx, a.lockClients()); err != nil {
		return nil, err
	}
	r.warn()
	return r, nil
}

// lockClients are the Redis servers the locks live on.
func (a *app) lockClients() []redis.UniversalClient {
	if len(a.masters) == 0 {
		return []redis.UniversalClient{a.rdb}
	}
	clients := make([]redis.UniversalClient, len(a.masters))
	for i, m := range a.masters {
		clients[i] = m
	}
	return clients
}

func (r *lockReport) readNodes(ctx context.Context, clients []redis.UniversalClient) error {
	for _, c := range clients {
		n, err := r.readNode(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", addrOf(c), err)
		}
		r.Nodes = append(r.Nodes, n)
	}
	return nil
}

// readNode reads the lock and the counter in one MULTI, so owner, lease and counter are of one moment:
// a lock without holders, or a missing counter, has no TTL either (PTTL -2).
func (r *lockReport) readNode(ctx context.Context, c redis.UniversalClient) (lockNode, error) {
	pipe := c.TxPipeline()
	holders, lease := pipe.HGetAll(ctx, r.LockKey), pipe.PTTL(ctx, r.LockKey)
	counter, counterTTL := pipe.Get(ctx, r.CounterKey), pipe.PTTL(ctx, r.CounterKey)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return lockNode{}, err
	}
	token, err := fencingCounter(counter, r.CounterKey)
	if err != nil {
		return lockNode{}, err
	}
	return lockNode{Addr: addrOf(c), Holders: toHolders(holders.Val()), LeaseMS: leaseMS(lease.Val()),
		Counter: token, CounterTTLMS: positiveMS(counterTTL.Val())}, nil
}

// addrOf is the address of a server's client; a cluster's is "cluster".
func addrOf(c redis.UniversalClient) string {
	if one, ok := c.(*redis.Client); ok {
		return one.Options().Addr
	}
	return "cluster"
}

func toHolders(fields map[string]string) []lockHolder {
	holders := []lockHolder{}
	for owner, count := range fields {
		holds, _ := strconv.ParseInt(count, 10, 64)
		holders = append(holders, lockHolder{Owner: owner, Holds: holds})
	}
	return holders
}

// leaseMS is the lease_remaining_ms of a lock's PTTL: -1 when it never expires, 0 when it does not exist.
func leaseMS(ttl time.Duration) int64 {
	if ttl == -1 { // go-redis passes PTTL's "no expiry" through as -1ns
		return -1
	}
	return max(millis(ttl), 0) // PTTL -2 (-2ns): no lock
}

// positiveMS is a TTL in milliseconds, nil when the key has none or does not exist.
func positiveMS(ttl time.Duration) *int64 {
	if ttl <= 0 {
		return nil
	}
	return new(millis(ttl))
}

// fencingCounter is the value of the counter, nil when it does not exist.
func fencingCounter(cmd *redis.StringCmd, key string) (*int64, error) {
	if cmd.Err() != nil { // redis.Nil: readNode returned every other error
		return nil, nil
	}
	token, err := strconv.ParseInt(cmd.Val(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("fencing counter %s holds %q, not an integer", key, cmd.Val())
	}
	return &token, nil
}

// warn adds a warning when the next holder would get a token below the stored fence.
func (r *lockReport) warn() {
	// The next holder draws the counter's + 1, which a fence takes when equal: an elided batch (the
	// default) leaves the fence at the counter's + 1.
	reachable := r.reachableCounter()
	if r.Fence == 0 || reachable+1 >= r.Fence {
		return
	}
	what := "fencing counter"
	if r.Redlock {
		what = "fencing counter on a majority of the masters"
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("%s is %d, so the next holder's token %d is below the stored fence %d: "+
		"the next holder's writes will be refused as stale until the counter is raised (a worker raises it after "+
		"the first refusal)", what, reachable, reachable+1, r.Fence))
}

// reachableCounter is the counter the next holder starts from. A Redlock token is the highest counter of
// the majority that answered, so the lowest majority decides; a missing counter starts again at 1.
func (r *lockReport) reachableCounter() int64 {
	counters := make([]int64, len(r.Nodes))
	for i, n := range r.Nodes {
		if n.Counter != nil {
			counters[i] = *n.Counter
		}
	}
	slices.Sort(counters)
	return counters[len(counters)/2] // the highest counter of the lowest majority
}

// nothingKnown is a not-found error when no server holds a lock or a counter for the SKU and it has no
// stock either.
func (r *lockReport) nothingKnown() error {
	if r.StockFound || slices.ContainsFunc(r.Nodes, lockNode.inUse) {
		return nil
	}
	return notFound(fmt.Sprintf("nothing known about SKU %q: no stock, lock or fencing counter", r.SKU))
}

func (n lockNode) inUse() bool { return len(n.Holders) > 0 || n.Counter != nil }

func (r lockReport) writeText(w io.Writer) {
	for _, n := range r.Nodes {
		r.writeLock(w, n)
		r.writeCounter(w, n)
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

func (r lockReport) writeLock(w io.Writer, n lockNode) {
	if len(n.Holders) == 0 {
		fmt.Fprintf(w, "%s on %s: free\n", r.LockKey, n.Addr)
	}
	for _, h := range n.Holders {
		fmt.Fprintf(w, "%s on %s: held by %s (holds %d), %s\n", r.LockKey, n.Addr, h.Owner, h.Holds, n.lease())
	}
}

func (n lockNode) lease() string {
	if n.LeaseMS < 0 {
		return "no lease: it never expires (stuck?)"
	}
	return "lease " + human(n.LeaseMS) + " left"
}

func (r lockReport) writeCounter(w io.Writer, n lockNode) {
	switch {
	case n.Counter == nil:
		fmt.Fprintf(w, "%s on %s: missing (the next acquisition gets token 1)\n", r.CounterKey, n.Addr)
	case n.CounterTTLMS == nil:
		fmt.Fprintf(w, "%s on %s: %d (no TTL)\n", r.CounterKey, n.Addr, *n.Counter)
	default:
		fmt.Fprintf(w, "%s on %s: %d (expires in %s)\n", r.CounterKey, n.Addr, *n.Counter, human(*n.CounterTTLMS))
	}
}
