package inventory

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ElideLock as ReserveBatch's fence takes the SKU's lock inside the script (lock elision: Rajwar and
// Goodman, "Speculative Lock Elision", MICRO 2001, done here by the server rather than the hardware):
// when nobody holds the lock, the script draws a new token from the lock's fencing counter, as an
// acquisition would, and decides the batch under it; the lock is held, as far as anyone can tell, for the
// duration of the script, which runs alone on the server. When the lock is held the batch fails with
// ErrLocked and writes nothing. Needs WithLockElision.
const ElideLock int64 = -1

// MaxBatch is the most orders one ReserveBatch takes: 64. The batch is one script call, and Redis runs
// nothing else while a script runs, so an unbounded batch would stall every other client of the server.
const MaxBatch = 64

var (
	//go:embed reserve_batch.lua
	reserveBatchSrc    string
	reserveBatchScript = redis.NewScript(reserveBatchSrc)
)

// ReserveBatch decides 1..MaxBatch orders of one SKU in one script call (flat combining: one round trip
// and one stock update for the batch). The outcomes, in the order of orders, and what Redis holds after
// are those of calling Reserve for each order in turn with fence: every order gets its own recorded
// outcome, a recorded one (also an order id that came earlier in the batch) is replayed, and a rejection
// is an Outcome. The fence and stock checks run once for the batch: an error fails it all and writes
// nothing. A batch whose orders all have a recorded outcome is replayed unchecked, as Reserve would be.
// With fence ElideLock the batch takes the lock itself (see ElideLock); each Outcome's Fence is the token
// it drew.
//
// Invalid input fails with ErrInvalid, naming the order, before anything is sent: an order Reserve would
// refuse, orders of more than one SKU, or no or more than MaxBatch orders. Other errors are Reserve's.
func (s *Store) ReserveBatch(ctx context.Context, orders []Order, fence int64) ([]Outcome, error) {
	if err := s.validateBatch(orders, fence); err != nil {
		return nil, err
	}
	return traceReserveBatch(ctx, orders, fence, func(ctx context.Context) ([]Outcome, error) {
		reply, err := s.eval(ctx, reserveBatchScript, s.batchKeys(orders, fence), s.batchArgs(orders, fence)...).Slice()
		if err != nil {
			return nil, scriptError(fmt.Sprintf("reserve %d orders of", len(orders)), "", orders[0].SKU, fence, err)
		}
		return decodeOutcomes(orders, reply)
	})
}

// validateBatch checks a batch as Reserve checks each of its orders, and that they share one SKU.
func (s *Store) validateBatch(orders []Order, fence int64) error {
	if err := checkRange("batch size", int64(len(orders)), 1, MaxBatch); err != nil {
		return err
	}
	sku := orders[0].SKU
	for i, o := range orders {
		if err := ValidateOrder(o.ID, o.SKU, o.Quantity); err != nil {
			return fmt.Errorf("%w (batch order %d, id %s)", err, i, quote(o.ID))
		}
		if o.SKU != sku {
			return fmt.Errorf("%w sku %s of batch order %d, id %s: want %s, the sku of the batch's first order",
				ErrInvalid, quote(o.SKU), i, quote(o.ID), quote(sku))
		}
	}
	return checkRange("fence", fence, s.minFence, MaxStock)
}

// batchKeys are the keys of reserve_batch.lua: the stock, the lock's fencing counter when the store
// compares with it, the lock when the batch takes it itself, then the outcome record of each order.
func (s *Store) batchKeys(orders []Order, fence int64) []string {
	sku := orders[0].SKU
	keys := make([]string, 0, len(orders)+2)
	keys = append(keys, StockKey(sku))
	if s.fenceCounter != nil {
		keys = append(keys, s.fenceCounter(sku))
	}
	if fence == ElideLock {
		keys = append(keys, s.lock(sku))
	}
	for _, o := range orders {
		keys = append(keys, OrderKey(sku, o.ID))
	}
	return keys
}

// batchArgs are the arguments of reserve_batch.lua: the fence, the outcome TTL, whether a replay writes,
// the fencing counter's TTL, then each quantity.
func (s *Store) batchArgs(orders []Order, fence int64) []any {
	args := make([]any, 0, len(orders)+4)
	args = append(args, fence, s.ttlMillis, s.replayWrites(), s.counterTTL)
	for _, o := range orders {
		args = append(args, o.Quantity)
	}
	return args
}

// decodeOutcomes reads the reply of reserve_batch.lua: one decodeOutcome reply per order.
func decodeOutcomes(orders []Order, reply []any) ([]Outcome, error) {
	if len(reply) != len(orders) {
		return nil, fmt.Errorf("inventory: unexpected script reply %v for a batch of %d orders", reply, len(orders))
	}
	outs := make([]Outcome, len(orders))
	for i, o := range orders {
		fields, ok := reply[i].([]any)
		if !ok {
			return nil, fmt.Errorf("inventory: unexpected script reply %v for order %q", reply[i], o.ID)
		}
		out, err := decodeOutcome(o.ID, o.SKU, fields)
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}
	return outs, nil
}
