package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
)

// Decode is a middleware that decodes and validates the order of each message once and puts it in the
// message context (OrderFrom), for the lock middleware's key and the handler.
func Decode(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := DecodeOrder(msg.Payload)
		if err != nil {
			return nil, err
		}
		msg.SetContext(WithOrder(msg.Context(), o))
		return h(msg)
	}
}

// OrderOf returns the order of a message that Decode decoded.
func OrderOf(msg *message.Message) (Order, error) {
	o, ok := OrderFrom(msg.Context())
	if !ok {
		return o, fmt.Errorf("%w: message %s was not decoded", ErrBadInput, msg.UUID)
	}
	return o, nil
}

// SKU is the lock key of a message: the SKU of its order. It needs Decode to have run.
func SKU(msg *message.Message) (string, error) {
	o, err := OrderOf(msg)
	return o.SKU, err
}

// Lock is what the handler needs of the SKU lock an order holds.
type Lock struct {
	// Token is the lock's fencing token, which the stock write carries; 0 writes unfenced.
	Token int64
	// Waited is how long the order waited for the lock, reported in its outcome.
	Waited time.Duration
}

// Reserver is the order handler: it reserves stock for the order and publishes the outcome.
type Reserver struct {
	Store Store
	// Results publishes the outcome events. It must outlive the router (not a handler's own publisher,
	// which the router closes while handlers may still run).
	Results      message.Publisher
	ResultsTopic string
	// Worker names this worker in outcome events.
	Worker string
}

// Store decides orders: *inventory.Store, or a wrapper around it (the worker's history recording).
type Store interface {
	Reserve(ctx context.Context, o inventory.Order, fence int64) (inventory.Outcome, error)
}

// Reserve reserves o under lock and publishes the outcome. An error leaves the order to be retried: the
// reservation is idempotent, so a retry returns the outcome decided the first time.
func (r *Reserver) Reserve(ctx context.Context, o Order, lock Lock) error {
	out, err := r.Store.Reserve(ctx, inventory.Order{ID: o.OrderID, SKU: o.SKU, Quantity: o.Quantity}, lock.Token)
	if err != nil {
		return fmt.Errorf("reserve order %s: %w", o.OrderID, err)
	}
	payload, err := json.Marshal(newResult(out, r.Worker, lock.Waited))
	if err != nil {
		return err
	}
	res := message.NewMessage(watermill.NewUUID(), payload)
	res.SetContext(ctx)
	if err := r.Results.Publish(r.ResultsTopic, res); err != nil {
		return fmt.Errorf("publish outcome of order %s: %w", o.OrderID, err)
	}
	return nil
}
