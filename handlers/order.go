package handlers

import (
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

func newResult(out inventory.Outcome, worker string, waited time.Duration) order.Result {
	return order.Result{OrderID: out.OrderID, SKU: out.SKU, Quantity: out.Quantity, Status: out.Status,
		Reason: out.Reason, AvailableAfter: out.AvailableAfter, Fence: out.Fence, Replayed: out.Replayed,
		Worker: worker, ProcessedAt: time.Now().UTC(), LockWaitMs: float64(waited.Microseconds()) / 1000}
}

func newOrderResult(o order.Order, out inventory.OrderOutcome, worker string, waited time.Duration) order.Result {
	r := order.Result{OrderID: out.OrderID, SKU: out.SKU, Status: out.Status, Reason: out.Reason, Replayed: out.Replayed,
		Worker: worker, ProcessedAt: time.Now().UTC(), LockWaitMs: float64(waited.Microseconds()) / 1000}
	if o.Kind() != order.TypeReserve {
		r.Type = o.Type
	}
	for _, l := range out.Lines {
		r.Lines = append(r.Lines, order.LineResult{SKU: l.SKU, Quantity: l.Quantity, Status: l.Status, Reason: l.Reason,
			AvailableAfter: l.AvailableAfter, Fence: l.Fence})
		r.Quantity += l.Quantity
	}
	return r
}
