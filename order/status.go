package order

import "errors"

// ErrInvalid is wrapped by every input error; the message names the field and its value.
var ErrInvalid = errors.New("invalid")

// Status is what happened to an order.
type Status string

// The statuses of an outcome.
const (
	StatusReserved Status = "reserved"
	StatusRejected Status = "rejected"
	StatusReleased Status = "released"
	// A reserved order cancelled (Cancel): its stock went back to available.
	StatusCancelled Status = "cancelled"
	// A reserved order fulfilled (Fulfil): its stock left reserved for good.
	StatusFulfilled Status = "fulfilled"
)

// Reason says why an order was rejected.
type Reason string

// The reasons of a rejected outcome; a reserved or released one has none.
const (
	ReasonInsufficientStock Reason = "insufficient_stock"
	ReasonUnknownSKU        Reason = "unknown_sku"
	// A line of a basket that would have fitted, rejected with its basket because another line did not.
	ReasonOtherLine Reason = "other_line_rejected"
	// Lifecycle events (Cancel, Fulfil) that cannot apply to the order as recorded.
	ReasonUnknownOrder     Reason = "unknown_order"     // no order of that id has a record for the SKU
	ReasonNotReserved      Reason = "not_reserved"      // the order was rejected
	ReasonAlreadyCancelled Reason = "already_cancelled" // a fulfil after a cancel
	ReasonAlreadyFulfilled Reason = "already_fulfilled" // a cancel after a fulfil
	// The reason of a cancelled outcome whose cancel came before the order was reserved: the order,
	// when it comes, reserves nothing.
	ReasonCancelledEarly Reason = "cancelled_early"
)
