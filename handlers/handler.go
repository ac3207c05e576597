package handlers

import (
	"context"
	"encoding/json"
	"errors"
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

// SKUs are the lock keys of a message: the SKUs of its order (Order.SKUs). It needs Decode to have run.
func SKUs(msg *message.Message) ([]string, error) {
	o, err := OrderOf(msg)
	if err != nil {
		return nil, err
	}
	return o.SKUs(), nil
}

// Reserver is the order handler: it decides the orders of one SKU waiting in the process together, in one
// stock script call, and makes their outcome events.
type Reserver struct {
	Store Store
	// Worker names this worker in outcome events.
	Worker string
}

// Store decides orders: *inventory.Store, or a wrapper around it (the worker's history recording).
type Store interface {
	ReserveBatch(ctx context.Context, orders []inventory.Order, fence int64) ([]inventory.Outcome, error)
	ReserveLines(ctx context.Context, orderID string, lines []inventory.Line, fences inventory.Fences) (inventory.OrderOutcome, error)
	Cancel(ctx context.Context, orderID, sku string, fences inventory.Fences) (inventory.OrderOutcome, error)
	Fulfil(ctx context.Context, orderID, sku string, fences inventory.Fences) (inventory.OrderOutcome, error)
}

// Request is one order to decide: its message's context (the outcome event continues its trace) and how
// long it has waited for the SKU's lock, reported in its outcome.
type Request struct {
	Ctx    context.Context
	Order  Order
	Waited time.Duration
}

// Decide reserves the orders of reqs (1..inventory.MaxBatch, one SKU) under the lock's fencing token
// (0: unfenced) and returns one outcome event per request, in order, to be published to the results
// stream. An error decides nothing: every order is to be retried, and the reservation is idempotent, so a
// retry returns the outcome decided the first time.
func (r *Reserver) Decide(ctx context.Context, reqs []Request, token int64) ([]*message.Message, error) {
	orders := make([]inventory.Order, len(reqs))
	for i, req := range reqs {
		orders[i] = inventory.Order{ID: req.Order.OrderID, SKU: req.Order.SKU, Quantity: req.Order.Quantity}
	}
	outs, err := r.Store.ReserveBatch(ctx, orders, token)
	if err != nil {
		return nil, fmt.Errorf("reserve %s: %w", orderIDs(reqs), badIfReused(err))
	}
	msgs := make([]*message.Message, len(reqs))
	for i, out := range outs {
		payload, err := json.Marshal(newResult(out, r.Worker, reqs[i].Waited))
		if err != nil {
			return nil, err
		}
		msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
		msgs[i].SetContext(reqs[i].Ctx)
	}
	return msgs, nil
}

// orderIDs names the orders of reqs for an error: "order o-1", or "3 orders of SKU-1 (o-1 ...)".
func orderIDs(reqs []Request) string {
	if len(reqs) == 1 {
		return "order " + reqs[0].Order.OrderID
	}
	return fmt.Sprintf("%d orders of %s (%s ...)", len(reqs), reqs[0].Order.SKU, reqs[0].Order.OrderID)
}

// DecideOrder decides an order that is not Single (a basket, a cancel or a fulfil) under the locks of all
// its SKUs (fences: their tokens; nil: unfenced) and returns its outcome event. As with Decide, an error
// decides nothing that a retry would not decide the same way.
func (r *Reserver) DecideOrder(ctx context.Context, req Request, fences inventory.Fences) (*message.Message, error) {
	o := req.Order
	out, err := r.decide(ctx, o, fences)
	if err != nil {
		return nil, fmt.Errorf("%s order %s: %w", o.Kind(), o.OrderID, badIfReused(err))
	}
	payload, err := json.Marshal(newOrderResult(o, out, r.Worker, req.Waited))
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.SetContext(req.Ctx)
	return msg, nil
}

// decide runs the store call of o's type.
func (r *Reserver) decide(ctx context.Context, o Order, fences inventory.Fences) (inventory.OrderOutcome, error) {
	switch o.Kind() {
	case TypeCancel:
		return r.Store.Cancel(ctx, o.OrderID, o.SKU, fences)
	case TypeFulfil:
		return r.Store.Fulfil(ctx, o.OrderID, o.SKU, fences)
	}
	return r.Store.ReserveLines(ctx, o.OrderID, o.Lines, fences)
}

// badIfReused makes an order whose id another order used (inventory.ErrOrderConflict) bad input: no retry
// can decide it. (In a batch of several orders the worker decides each alone, so only that one fails.)
func badIfReused(err error) error {
	if errors.Is(err, inventory.ErrOrderConflict) {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return err
}
