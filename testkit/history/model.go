package history

import (
	"fmt"
	"hash/maphash"

	"github.com/anishathalye/porcupine"

	"github.com/stockflow/stockflow/order"
)

// state is the model's view of one SKU: its available stock and the decisions recorded for the orders
// that more than one operation is about.
type state struct {
	available int64
	orders    orders
	done      int // operations with a known outcome linearized so far
}

// skuModel is the sequential specification of one SKU's stock, as reserve.lua and release.lua implement
// it. A SKU that was not stocked rejects every reserve as unknown_sku (and records that decision).
type skuModel struct {
	initial int64
	stocked bool
	// tracked are the orders with more than one operation in the history: only their decisions can be
	// seen again (by a redelivery or a release). Not keeping the others keeps states that differ only in
	// unseen decisions equal, which porcupine's cache then merges.
	tracked map[string]bool
	known   int // operations with a known outcome in the history
}

func newModel(sku string, initial map[string]int64) skuModel {
	stock, stocked := initial[sku]
	return skuModel{initial: stock, stocked: stocked}
}

func (m skuModel) init() state { return state{available: m.initial} }

// forPorcupine returns m as porcupine takes it. Operations are *Op, their input and output at once.
func (m skuModel) forPorcupine() porcupine.Model {
	return porcupine.Model{
		Init:                      func() any { return m.init() },
		Step:                      m.step,
		Equal:                     func(a, b any) bool { return a.(state).equal(b.(state)) },
		Hash:                      func(s any) uint64 { return s.(state).hash() },
		DescribeOperation:         func(in, _ any) string { return in.(*Op).describe() },
		DescribeState:             func(s any) string { return s.(state).String() },
		DescribeOperationMetadata: func(in any) string { return in.(*Op).details() },
	}
}

// step accepts op when the store, in state s, would have answered what op recorded.
//
// An operation with an unknown outcome is accepted either way: porcupine lets it take effect here (when
// linearized before its infinite return) or never (when linearized at the end, after everything else).
// Where it would change nothing it is refused until every known operation is placed: taking no effect
// there is the same as taking effect at the end, and without this porcupine would try every subset of
// the pending unknown operations at every point (exponential in their number once the stock is gone).
func (m skuModel) step(st, in, _ any) (bool, any) {
	s, op := st.(state), in.(*Op)
	want, next, ok := m.apply(s, op)
	switch {
	case op.Failure == Unknown:
		return !next.equal(s) || s.done == m.known, next
	case !ok:
		return false, s
	}
	next.done++
	return matches(want, op.Result), next
}

// matches compares a recorded result with the model's. A result marked replayed is accepted for the
// operation that decided the order: go-redis retries a script whose reply was lost, and the retry gets
// the outcome the first attempt recorded. The reverse, a fresh decision for a decided order, is the
// double decision this check exists to catch.
func matches(want, got Result) bool {
	return got.Status == want.Status && got.Reason == want.Reason && got.Quantity == want.Quantity &&
		got.AvailableAfter == want.AvailableAfter && (got.Replayed == want.Replayed || got.Replayed)
}

// apply runs op on s; ok is false when the store would refuse it (a release of an order that is not
// reserved), and s is then unchanged.
func (m skuModel) apply(s state, op *Op) (_ Result, _ state, ok bool) {
	d, decided := s.orders.get(op.OrderID)
	switch {
	case decided && (op.Kind == Reserve || d.status == order.StatusReleased):
		return d.result(true), s, true // a redelivery: the first decision stands
	case op.Kind == Reserve:
		return m.reserve(s, op)
	case decided && d.status == order.StatusReserved:
		s.available += d.quantity
		d = decision{status: order.StatusReleased, quantity: d.quantity, after: s.available}
		return d.result(false), m.record(s, op.OrderID, d), true
	}
	return Result{}, s, false
}

// reserve decides an order seen for the first time: reserve-if-enough.
func (m skuModel) reserve(s state, op *Op) (Result, state, bool) {
	d := decision{status: order.StatusRejected, reason: order.ReasonUnknownSKU, quantity: op.Quantity}
	if m.stocked {
		d.reason, d.after = order.ReasonInsufficientStock, s.available
		if s.available >= op.Quantity {
			s.available -= op.Quantity
			d.status, d.reason, d.after = order.StatusReserved, "", s.available
		}
	}
	return d.result(false), m.record(s, op.OrderID, d), true
}

// record keeps the decision of a tracked order.
func (m skuModel) record(s state, orderID string, d decision) state {
	if m.tracked[orderID] {
		s.orders = s.orders.put(orderID, d)
	}
	return s
}

func (d decision) result(replayed bool) Result {
	return Result{Status: d.status, Reason: d.reason, Quantity: d.quantity, AvailableAfter: d.after, Replayed: replayed}
}

func (s state) equal(t state) bool {
	return s.available == t.available && s.done == t.done && s.orders.equal(t.orders)
}

func (s state) hash() uint64 {
	return s.orders.sum ^ maphash.Comparable(seed, [3]int64{s.available, int64(s.done), int64(s.orders.n)})
}

func (s state) String() string {
	return fmt.Sprintf("available %d (%d decisions of redelivered orders kept)", s.available, s.orders.n)
}

// describe is the operation's label in the visualization.
func (op *Op) describe() string {
	s := fmt.Sprintf("%s %s(%s", op.Worker, op.Kind, op.OrderID)
	if op.Kind == Reserve {
		s += fmt.Sprintf(", %d", op.Quantity)
	}
	if op.Failure != "" {
		return s + ") -> " + string(op.Failure)
	}
	return s + ") -> " + op.Result.String()
}

// details is the operation's tooltip in the visualization.
func (op *Op) details() string {
	s := fmt.Sprintf("op %s (%s), token %d, invoked %s", op.ID, op.Source, op.Token, clock(op.Invoked))
	if !op.Returned.IsZero() {
		s += ", returned " + clock(op.Returned)
	}
	if op.Error != "" {
		s += ": " + op.Error
	}
	return s
}
