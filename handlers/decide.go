package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
)

// orderIDs names the orders of batch for an error: "order o-1", or "3 orders of SKU-1 (o-1 ...)".
func orderIDs(batch []*queued) string {
	if len(batch) == 1 {
		return "order " + batch[0].order.OrderID
	}
	return fmt.Sprintf("%d orders of %s (%s ...)", len(batch), batch[0].order.SKU, batch[0].order.OrderID)
}

// decideOrder decides a basket or a lifecycle event in sec (the locks of all its SKUs, fenced by each
// one's token; elided: the script takes them; nil: unfenced), then publishes its outcome in the next
// commit round, with the other orders decided meanwhile. On one Redis
// (without replica acks) a basket is reserved in that round too: its script goes in the round's pipeline
// with the batches' (Store.BatchesBaskets).
func (h *Handler) decideOrder(msg *message.Message, o order.Order, sec *lockmw.Section) error {
	ctx := msg.Context()
	var fences inventory.Fences
	q := &queued{msg: msg, order: o}
	if sec != nil {
		fences, q.waited = inventory.Fences{}, sec.Waited()
		for _, sku := range o.SKUs() {
			fences[sku] = sec.Token(sku)
			if sec.Elided() {
				fences[sku] = inventory.ElideLock
			}
		}
	}
	if o.Kind() == order.TypeReserve && h.cfg.Store.BatchesBaskets() {
		return h.committer.reserveBasket(ctx, q, &inventory.Basket{OrderID: o.OrderID, Lines: o.Lines, Fences: fences})
	}
	out, err := h.storeCall(ctx, o, fences)
	if err != nil {
		return fmt.Errorf("%s order %s: %w", o.Kind(), o.OrderID, asHandlerError(err))
	}
	result, err := h.resultMessage(ctx, newOrderResult(o, out, h.cfg.Worker, q.waited))
	if err != nil {
		return err
	}
	return h.committer.publish(ctx, []*queued{q}, []*message.Message{result})
}

// storeCall runs the store call of o's type.
func (h *Handler) storeCall(ctx context.Context, o order.Order, fences inventory.Fences) (inventory.OrderOutcome, error) {
	switch o.Kind() {
	case order.TypeCancel:
		return h.cfg.Store.Cancel(ctx, o.OrderID, o.SKU, fences)
	case order.TypeFulfil:
		return h.cfg.Store.Fulfil(ctx, o.OrderID, o.SKU, fences)
	}
	return h.cfg.Store.ReserveLines(ctx, o.OrderID, o.Lines, fences)
}

// resultMessage is the outcome event of r, continuing the trace of the order's context.
func (h *Handler) resultMessage(ctx context.Context, r order.Result) (*message.Message, error) {
	payload, ok := r.AppendJSON(make([]byte, 0, 256))
	if !ok {
		var err error
		if payload, err = json.Marshal(r); err != nil {
			return nil, err
		}
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.SetContext(ctx)
	return msg, nil
}

// asHandlerError makes an order whose id another order used (inventory.ErrOrderConflict) bad input: no
// retry can decide it (in a batch of several orders the leader decides each alone, so only that one
// fails); and a write that found the lock held in an elided section (inventory.ErrLocked) the lock
// middleware's ErrLocked, so that it takes the lock.
func asHandlerError(err error) error {
	switch {
	case errors.Is(err, inventory.ErrOrderConflict):
		return fmt.Errorf("%w: %w", order.ErrBadInput, err)
	case errors.Is(err, inventory.ErrLocked):
		return fmt.Errorf("%w: %w", lockmw.ErrLocked, err)
	}
	return err
}
