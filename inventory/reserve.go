package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

var (
	//go:embed reserve.lua
	reserveSrc    string
	reserveScript = stockScript(reserveSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = stockScript(releaseSrc)

	//go:embed raise_fence.lua
	raiseFenceSrc    string
	raiseFenceScript = redis.NewScript(raiseFenceSrc)
)

// Order is what Reserve decides on: an order id, the SKU it wants and how many.
type Order struct {
	ID       string
	SKU      string
	Quantity int64
}

// Reserve takes o.Quantity of o.SKU for order o.ID, or records why it could not, in one atomic script.
//
// If the order already has a recorded outcome, that outcome comes back as is with Replayed set, even
// when the quantity differs: an order id is decided once. A fence below the SKU's stored fence fails with
// ErrStaleFence and writes nothing; a higher one is stored. fence 0 skips fencing.
//
// A rejection is an Outcome, not an error: StatusRejected with ReasonUnknownSKU or
// ReasonInsufficientStock (AvailableAfter then holds what was available). Errors wrap order.ErrInvalid,
// ErrStaleFence or the Redis or context error.
func (s *Store) Reserve(ctx context.Context, o Order, fence int64) (Outcome, error) {
	if err := order.ValidateOrder(o.ID, o.SKU, o.Quantity); err != nil {
		return Outcome{}, err
	}
	if err := checkRange("fence", fence, 0, stock.MaxStock); err != nil {
		return Outcome{}, err
	}
	return traceReserve(ctx, o, fence, func(ctx context.Context) (Outcome, error) {
		reply, err := s.eval(ctx, reserveScript, s.keys(o.SKU, o.ID), o.Quantity, fence, s.ttlMillis, s.replayWrites()).Slice()
		if err != nil {
			return Outcome{}, scriptError("reserve", o.ID, o.SKU, fence, err)
		}
		return decodeOutcome(o.ID, o.SKU, reply)
	})
}

// Release gives back the quantity reserved for orderID, once: it is the compensation for a cancelled
// order. A second call changes nothing and returns the released outcome with Replayed set. An order that
// was rejected, or has no recorded outcome (never reserved, or expired), fails with ErrNotReserved.
// Fencing works as in Reserve.
func (s *Store) Release(ctx context.Context, orderID, sku string, fence int64) (Outcome, error) {
	if err := order.ValidateOrderID(orderID); err != nil {
		return Outcome{}, err
	}
	if err := order.ValidateSKU(sku); err != nil {
		return Outcome{}, err
	}
	if err := checkRange("fence", fence, 0, stock.MaxStock); err != nil {
		return Outcome{}, err
	}
	reply, err := s.eval(ctx, releaseScript, s.keys(sku, orderID), fence, s.replayWrites()).Slice()
	if err != nil {
		return Outcome{}, scriptError("release", orderID, sku, fence, err)
	}
	return decodeOutcome(orderID, sku, reply)
}

// RaiseFence stores token (> 0) as the SKU's fence unless a higher one is stored, so that from now on every
// older token is refused although its new holder has not written yet. A lock whose fencing counters live
// on other Redis servers (Redlock) calls it right after each acquisition, before the holder's handler
// runs; a lock on the stock's own Redis needs no call (WithFenceCounter compares with its counter).
// A token below the stored fence fails with a *StaleFenceError. An unknown SKU keeps no fence.
func (s *Store) RaiseFence(ctx context.Context, sku string, token int64) error {
	if err := order.ValidateSKU(sku); err != nil {
		return err
	}
	if err := checkRange("fence", token, 1, stock.MaxStock); err != nil {
		return err
	}
	if err := s.eval(ctx, raiseFenceScript, []string{stock.Key(sku)}, token, s.replayWrites()).Err(); err != nil {
		return scriptError("raise the fence of", "", sku, token, err)
	}
	return nil
}

// decodeOutcome reads the script reply {replayed, status, reason, quantity, available_after, fence}.
func decodeOutcome(orderID, sku string, reply []any) (Outcome, error) {
	r := &replyReader{reply: reply, ok: len(reply) == 6}
	o := Outcome{OrderID: orderID, SKU: sku, Replayed: at[int64](r, 0) == 1, Status: order.Status(at[string](r, 1)),
		Reason: order.Reason(at[string](r, 2)), Quantity: at[int64](r, 3), AvailableAfter: at[int64](r, 4),
		Fence: at[int64](r, 5)}
	if !r.ok {
		return Outcome{}, fmt.Errorf("inventory: unexpected script reply %v for order %q", reply, orderID)
	}
	return o, nil
}

// replyReader reads the elements of a script's array reply of known length; ok turns false at the first
// element of another type.
type replyReader struct {
	reply []any
	ok    bool
}

// at returns element i of the reply (i below the length the reader was made for).
func at[T any](r *replyReader, i int) (v T) {
	if r.ok {
		v, r.ok = r.reply[i].(T)
	}
	return v
}

// scriptError turns the scripts' error replies into the package's sentinels. orderID is "" for a call
// about the SKU as a whole.
func scriptError(op, orderID, sku string, fence int64, err error) error {
	subject := skuSubject(sku)
	if orderID != "" {
		subject = orderSubject(orderID, sku)
	}
	var detail string
	if _, after, ok := strings.Cut(err.Error(), " "); ok {
		detail = after
	}
	switch {
	case redis.HasErrorPrefix(err, "STALEFENCE "), redis.HasErrorPrefix(err, "STALETOKEN "):
		stored, _ := strconv.ParseInt(detail, 10, 64)
		return &StaleFenceError{Op: op, Subject: subject, SKU: sku, Token: fence, Stored: stored,
			Current: redis.HasErrorPrefix(err, "STALETOKEN ")}
	case redis.HasErrorPrefix(err, "NOTRESERVED none"):
		return fmt.Errorf("%w: %s has no recorded outcome", ErrNotReserved, subject)
	case redis.HasErrorPrefix(err, "NOTRESERVED "):
		return fmt.Errorf("%w: %s was %s", ErrNotReserved, subject, detail)
	}
	word, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "ERR "), " ")
	if e, ok := scriptErrors[word]; ok {
		return fmt.Errorf("%w: %s %s%s", e.sentinel, op, subject, strings.Replace(e.then, "%s", detail, 1))
	}
	return fmt.Errorf("inventory: %s %s: %w", op, subject, err)
}

// scriptErrors are the scripts' error replies, by their first word, that wrap a sentinel: the error says
// "<sentinel>: <op> <subject>" and then, with %s the rest of the reply, then.
var scriptErrors = map[string]struct {
	sentinel error
	then     string
}{
	"IDCONFLICT": {ErrOrderConflict, " (line %s of the call has another order's record)"},
	"LOCKED":     {ErrLocked, ""},
	"NOTEARLY":   {ErrNotLocked, " (the order came meanwhile)"},
	"UNKNOWNSKU": {stock.ErrUnknownSKU, ""},
	"CORRUPT":    {ErrCorrupt, ": stock field %s is not an integer"},
}

func orderSubject(orderID, sku string) string { return fmt.Sprintf("order %q of sku %q", orderID, sku) }

// StaleFenceError is a write refused because its fencing token is below the SKU's stored fence: the
// writer's lock was taken over, or the lock's fencing counter fell behind the stored fence (it was lost)
// and must be raised past Stored. errors.Is(err, ErrStaleFence) holds for it.
type StaleFenceError struct {
	Op, Subject string // the operation and the order or SKU it was about
	SKU         string
	Token       int64 // the refused token
	Stored      int64 // the SKU's stored fence, or with Current the lock's current token
	// Current: the token is below the lock's fencing counter (WithFenceCounter): a newer holder has the
	// lock, whether or not it wrote yet.
	Current bool
}

func (e *StaleFenceError) Error() string {
	if e.Current {
		return fmt.Sprintf("%v: %s %s: token %d is below the lock's current token %d", ErrStaleFence, e.Op, e.Subject, e.Token, e.Stored)
	}
	return fmt.Sprintf("%v: %s %s: token %d is below the stored fence %d", ErrStaleFence, e.Op, e.Subject, e.Token, e.Stored)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }
