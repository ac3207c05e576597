package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/stockflow/stockflow/inventory"
)

// MaxPayload is the largest order payload accepted, in bytes.
const MaxPayload = 64 << 10

// ErrBadInput is wrapped by every error about a message that can never be processed: undecodable or
// invalid. Such a message goes to the poison stream instead of being retried.
var ErrBadInput = errors.New("handlers: bad input")

// Order is the event producers publish to the orders stream, as the JSON payload of a stream entry:
//
//	{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}
//
// order_id and sku are 1-128 characters of [A-Za-z0-9._:-]; quantity is 1..1,000,000; placed_at
// (RFC 3339) is optional. Unknown fields are ignored.
type Order struct {
	OrderID  string    `json:"order_id"`
	SKU      string    `json:"sku"`
	Quantity int64     `json:"quantity"`
	PlacedAt time.Time `json:"placed_at,omitzero"`
}

// Result is the outcome event the worker publishes to the results stream for every processed order. A
// redelivered order yields the outcome recorded the first time (Replayed), never a second decrement.
type Result struct {
	OrderID  string           `json:"order_id"`
	SKU      string           `json:"sku"`
	Quantity int64            `json:"quantity"`
	Status   inventory.Status `json:"status"`
	Reason   inventory.Reason `json:"reason"`
	// AvailableAfter is the SKU's available stock right after the reservation, or when it was rejected.
	AvailableAfter int64 `json:"available_after"`
	// Fence is the fencing token the stock write carried, 0 when unfenced.
	Fence int64 `json:"fence"`
	// Replayed is true when the outcome was decided by an earlier delivery and returned as recorded.
	Replayed    bool      `json:"replayed"`
	Worker      string    `json:"worker"`
	ProcessedAt time.Time `json:"processed_at"`
	// LockWaitMs is how long this delivery waited for its SKU lock, in milliseconds.
	LockWaitMs float64 `json:"lock_wait_ms"`
}

func newResult(out inventory.Outcome, worker string, waited time.Duration) Result {
	return Result{OrderID: out.OrderID, SKU: out.SKU, Quantity: out.Quantity, Status: out.Status,
		Reason: out.Reason, AvailableAfter: out.AvailableAfter, Fence: out.Fence, Replayed: out.Replayed,
		Worker: worker, ProcessedAt: time.Now().UTC(), LockWaitMs: float64(waited.Microseconds()) / 1000}
}

// DecodeOrder parses and validates an order payload. Its errors wrap ErrBadInput and say what is wrong.
func DecodeOrder(payload []byte) (Order, error) {
	var o Order
	switch {
	case len(payload) == 0:
		return o, fmt.Errorf("%w: empty payload", ErrBadInput)
	case len(payload) > MaxPayload:
		return o, fmt.Errorf("%w: payload of %d bytes is over the %d byte limit", ErrBadInput, len(payload), MaxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("%w: payload is not an order JSON object: %v", ErrBadInput, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return o, fmt.Errorf("%w: payload has data after the order JSON object", ErrBadInput)
	}
	if err := inventory.ValidateOrder(o.OrderID, o.SKU, o.Quantity); err != nil {
		return o, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return o, nil
}

type orderKey struct{}

// WithOrder returns ctx carrying the decoded order of the message being handled.
func WithOrder(ctx context.Context, o Order) context.Context {
	return context.WithValue(ctx, orderKey{}, o)
}

// OrderFrom returns the order stored by WithOrder.
func OrderFrom(ctx context.Context) (Order, bool) {
	o, ok := ctx.Value(orderKey{}).(Order)
	return o, ok
}
