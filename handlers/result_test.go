package handlers

import (
	"testing"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// The outcomes a worker writes take the flat way (else they would be right, and slow).
func TestTheFlatWayWritesAWorkersOutcomes(t *testing.T) {
	for _, out := range []inventory.Outcome{
		{OrderID: "o-1", SKU: "SKU-1", Quantity: 2, Status: order.StatusReserved, AvailableAfter: 3, Fence: -1},
		{OrderID: "order-7f3a", SKU: "SKU-0", Quantity: 9, Status: order.StatusRejected, Reason: order.ReasonInsufficientStock, Replayed: true},
	} {
		r := newResult(out, "worker-1", 1500*time.Microsecond)
		if _, ok := r.AppendJSON(nil); !ok {
			t.Errorf("%+v went the general way", r)
		}
	}
}
