package history

import (
	"fmt"
	"time"

	"github.com/stockflow/stockflow/order"
)

// Kind is a stock operation.
type Kind string

// The operations a history holds: inventory.Store's Reserve and Release.
const (
	Reserve Kind = "reserve"
	Release Kind = "release"
)

// Failure says why an operation has no result.
type Failure string

// The failures of an operation.
const (
	// Refused: the store definitely wrote nothing (a stale fence, invalid input, nothing to release), so
	// the operation had no effect.
	Refused Failure = "refused"
	// Unknown: the operation may or may not have been applied (a timeout, a lost connection, a process
	// killed before it recorded the return).
	Unknown Failure = "unknown"
)

// History is what Load read: every stock operation and every lock hold, in invocation order.
type History struct {
	Ops   []Op
	Holds []Hold
	// Truncated lists the file:line of each incomplete last line that was left out (a process killed
	// while writing it).
	Truncated []string
}

// Result is what a stock operation that returned answered: the fields of inventory.Outcome that the
// checks compare.
type Result struct {
	Status   order.Status `json:"status"`
	Reason   order.Reason `json:"reason"`
	Quantity int64        `json:"quantity"`
	// AvailableAfter is the available stock right after the operation (for a replay: after the
	// operation that decided the order).
	AvailableAfter int64 `json:"available_after"`
	Replayed       bool  `json:"replayed"`
}

// Op is one stock operation: its invocation and, unless Failure says otherwise, its result.
type Op struct {
	ID       string // unique across processes and restarts
	Worker   string
	Kind     Kind
	SKU      string
	OrderID  string
	Quantity int64
	Token    int64 // fencing token, 0 when unfenced
	Invoked  time.Time
	Returned time.Time // zero when nothing was recorded after the invocation
	Result   Result    // when Failure is ""
	Failure  Failure
	Error    string // the error of a failed operation
	Source   string // file:line of the invocation
}

// Write reports whether the store accepted op as a write with a fencing token: it returned, decided the
// order itself (not a replay), touched a stocked SKU and carried a token. These are the writes the
// fencing check holds to token order.
func (op *Op) Write() bool {
	return op.Failure == "" && !op.Result.Replayed && op.Token > 0 &&
		op.Result.Reason != order.ReasonUnknownSKU
}

// String describes op for a report: who, what, when and how it ended.
func (op *Op) String() string {
	what := fmt.Sprintf("%s %s order %q", op.Worker, op.Kind, op.OrderID)
	if op.Kind == Reserve {
		what += fmt.Sprintf(" x%d", op.Quantity)
	}
	return fmt.Sprintf("%s token %d, invoked %s, %s", what, op.Token, clock(op.Invoked), op.outcome())
}

func (op *Op) outcome() string {
	switch {
	case op.Failure != "" && op.Returned.IsZero():
		return "no return recorded (unknown)"
	case op.Failure != "":
		return fmt.Sprintf("returned %s: %s (%s)", clock(op.Returned), op.Failure, op.Error)
	}
	return fmt.Sprintf("returned %s: %s", clock(op.Returned), op.Result)
}

// String reads like "reserved, available 4" or "rejected insufficient_stock, available 0, replayed".
func (r Result) String() string {
	s := string(r.Status)
	if r.Reason != "" {
		s += " " + string(r.Reason)
	}
	s += fmt.Sprintf(", available %d", r.AvailableAfter)
	if r.Replayed {
		s += ", replayed"
	}
	return s
}

// Hold is one lock acquisition, with its release when one was recorded.
type Hold struct {
	Key    string // the lock key: the SKU it guards
	Owner  string
	Worker string
	Token  int64
	// Invoked is when Acquire was called; Acquired when it returned: the store knows Token from then on.
	Invoked, Acquired time.Time
	Released          time.Time // zero when no release was recorded (lease lost, process killed)
	Source            string    // file:line of the acquisition
}

// String describes h for a report.
func (h *Hold) String() string {
	s := fmt.Sprintf("%s acquired token %d (owner %s) at %s", h.Worker, h.Token, h.Owner, clock(h.Acquired))
	if !h.Released.IsZero() {
		s += ", released " + clock(h.Released)
	}
	return s
}

// clock formats a time of day to the microsecond: the histories of one test run span minutes.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
