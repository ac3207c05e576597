package inventory

import (
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// DefaultOutcomeTTL is how long the outcome of an order is kept: 7 days.
const DefaultOutcomeTTL = 7 * 24 * time.Hour

var (
	// ErrStaleFence means the fencing token is below the highest one the SKU has seen.
	ErrStaleFence = errors.New("inventory: stale fencing token")
	// ErrNotReserved means Release found no reservation to give back.
	ErrNotReserved = errors.New("inventory: order not reserved")
	// ErrCorrupt means the SKU's stock hash holds a value no script can work with (a field that is not an
	// integer). Retrying cannot help until an operator repairs the hash.
	ErrCorrupt = errors.New("inventory: corrupt stock")
	// ErrReplicaAcks means fewer replicas than WithReplicaAcks asks for acknowledged a write in time. The
	// write stays applied on the master: the error is transient, see WithReplicaAcks for what to retry.
	ErrReplicaAcks = errors.New("inventory: too few replica acks")
	// ErrNotLocked means a lifecycle call found the order holds a SKU for which the caller passed no fence:
	// its lock was not taken. Look the lines up again (Lines), lock them all, retry.
	ErrNotLocked = errors.New("inventory: a SKU of the order is not locked")
	// ErrOrderConflict means the order id was used before by another order (other SKUs, a basket for a
	// single-SKU order or the reverse): its records are not this order's to replay. Nothing was written;
	// retrying cannot help. It wraps order.ErrInvalid.
	ErrOrderConflict = fmt.Errorf("%w order: its order id was used by another order", order.ErrInvalid)
	// ErrLocked means ReserveBatch with ElideLock found the SKU's lock held: nothing was written; take the
	// lock and decide under its token.
	ErrLocked = errors.New("inventory: the sku's lock is held")
	// ErrSlotMoving means the SKU's cluster slot was still being moved to another node after the quick
	// retries of a script call (see retryTryAgain): nothing was written; the error is transient, and a
	// later call goes through once the move is done.
	ErrSlotMoving = errors.New("inventory: the sku's cluster slot is being moved")
)

// Outcome is the decision recorded for an order. Its JSON field names are those of the outcome event.
type Outcome struct {
	OrderID  string       `json:"order_id"`
	SKU      string       `json:"sku"`
	Quantity int64        `json:"quantity"`
	Status   order.Status `json:"status"`
	Reason   order.Reason `json:"reason"`
	// AvailableAfter is the available stock right after the operation, or when it was rejected.
	AvailableAfter int64 `json:"available_after"`
	// Fence is the fencing token the operation ran with, 0 when unfenced.
	Fence int64 `json:"fence"`
	// Replayed is true when the outcome was recorded by an earlier call and returned as is.
	Replayed bool `json:"replayed"`
}

// Store reserves and restocks inventory in one Redis. It is safe for concurrent use.
type Store struct {
	rdb       redis.Scripter
	ttlMillis int64
	// fenceCounter names the lock's fencing counter of a SKU (WithFenceCounter); nil: none.
	fenceCounter func(sku string) string
	// lock names the lock of a SKU and counterTTL is its fencing counter's TTL (WithLockElision); nil: no
	// elision.
	lock       func(sku string) string
	counterTTL int64 // milliseconds
	minFence   int64 // the least fence ReserveBatch takes: ElideLock with WithLockElision, else 0
	// replicaAcks replicas must acknowledge each write within ackTimeout (WithReplicaAcks); 0: no WAIT.
	replicaAcks int
	ackTimeout  time.Duration
	// crashAfterLine, set by tests, runs after each line of a basket reserved line by line (and makes every
	// basket go line by line); an error stops the basket there as a crash would.
	crashAfterLine func(line int) error
}

// Option configures a Store.
type Option func(*Store)

// WithOutcomeTTL sets how long the outcome of an order is kept; the default is DefaultOutcomeTTL.
// Durations below one millisecond are ignored: an outcome that never expires would grow Redis forever,
// and one that expires at once would break idempotency.
func WithOutcomeTTL(d time.Duration) Option {
	return func(s *Store) {
		if d >= time.Millisecond {
			s.ttlMillis = d.Milliseconds()
		}
	}
}

// WithFenceCounter makes every fenced write also compare its token with the lock's fencing counter of the
// SKU, named by counter (a key in the SKU's slot, on the same Redis as the stock): a token below the counter
// is refused (ErrStaleFence) as soon as a newer holder has its token, before that holder writes. Without
// it a stale token is refused only once a newer one has written. Only for a lock whose counter lives on
// the stock's Redis (rlock.Reentrant on the same server; not Redlock, whose counters are on its masters).
func WithFenceCounter(counter func(sku string) string) Option {
	return func(s *Store) { s.fenceCounter = counter }
}

// WithLockElision lets ReserveBatch take the SKU's lock inside its script (fence ElideLock): lock names the
// lock of a SKU and counter its fencing counter (keys in the SKU's slot, on the stock's Redis, in
// Redisson's layout: rlock.LockKey and rlock.TokenKey). An elided write decides under a token above every
// token that wrote and every token the counter issued, and raises the fence to it, so that a holder whose
// lease ran out is refused; it writes the counter only when there is none (a SKU never locked, a counter
// lost), creating it at the token's - 1 with the TTL counterTTL, as the lock's acquisitions set it
// (rlock.Config.TokenTTL; 0: none), or when it is behind the fence (raised to the token's - 1). The next acquisition's token, the counter's + 1, is the fence, which
// takes it. It implies WithFenceCounter(counter).
func WithLockElision(lock, counter func(sku string) string, counterTTL time.Duration) Option {
	return func(s *Store) {
		s.lock, s.fenceCounter, s.counterTTL, s.minFence = lock, counter, counterTTL.Milliseconds(), ElideLock
	}
}

// keys are the keys of a write about the order of sku: the stock, the outcome record, and the lock's
// fencing counter when the store compares with it.
func (s *Store) keys(sku, orderID string) []string {
	keys := []string{stock.Key(sku), OrderKey(sku, orderID)}
	if s.fenceCounter != nil {
		keys = append(keys, s.fenceCounter(sku))
	}
	return keys
}

// New returns a Store using rdb, which may be a *redis.Client, *redis.ClusterClient or *redis.Ring.
func New(rdb redis.Scripter, opts ...Option) *Store {
	s := &Store{rdb: rdb, ttlMillis: DefaultOutcomeTTL.Milliseconds()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// OrderKey is the Redis key of an order's outcome record for one of its SKUs ("order:{SKU}:<order_id>").
func OrderKey(sku, orderID string) string { return "order:{" + sku + "}:" + orderID }

//go:embed shared.lua
var sharedLua string

// stockScript is a stock script with the helpers the stock scripts share (shared.lua: int, same, stale) in
// front of it.
func stockScript(src string) *redis.Script { return redis.NewScript(sharedLua + src) }
