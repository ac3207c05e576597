package producer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/stockflow/stockflow/order"
)

// An order's final state follows from its outcomes: its reservation's (reserved or rejected), unless a
// cancel of it came back cancelled or a fulfil fulfilled. check then holds each SKU's stock to the lines
// of the orders by final state: reserved ones are still reserved, fulfilled ones left the stock, and
// cancelled and rejected ones hold nothing.

// settle derives every order's final state, sums what the orders hold per SKU, and counts the outcomes of
// the cancel and fulfil events. Orders whose outcomes contradict each other are problems.
func (c *collector) settle() {
	c.sum.Outcomes = len(c.seen)
	keys := slices.SortedFunc(maps.Keys(c.placed), func(a, b eventKey) int {
		return cmp.Or(strings.Compare(a.orderID, b.orderID), strings.Compare(string(a.kind), string(b.kind)))
	})
	for _, k := range keys {
		if k.kind != order.TypeReserve {
			c.sum.countLifecycle(c.seen[k])
			continue
		}
		o := c.outcomesOf(k.orderID)
		if problem := o.contradiction(); problem != "" {
			c.sum.Problems = append(c.sum.Problems, problem)
		}
		c.sum.hold(c.placed[k].lines, o.state())
	}
}

// orderOutcomes is what the outcomes say of one order.
type orderOutcomes struct {
	id      string
	reserve order.Status // its reservation's outcome: "" for none (missing, or poisoned)
	done    order.Status // what a cancel or fulfil of it that succeeded made it, "" for none
	known   bool         // every cancel or fulfil of it has an outcome
}

// outcomesOf gathers the outcomes of order id.
func (c *collector) outcomesOf(id string) orderOutcomes {
	o := orderOutcomes{id: id, reserve: c.seen[eventKey{order.TypeReserve, id}].Status, known: true}
	for _, kind := range []order.Type{order.TypeCancel, order.TypeFulfil} {
		k := eventKey{kind, id}
		if _, placed := c.placed[k]; !placed {
			continue
		}
		r, decided := c.seen[k]
		o.known = o.known && decided
		if r.Status == target(kind) {
			o.done = r.Status
		}
	}
	return o
}

// replayed: the reservation's outcome replays the order as since cancelled or fulfilled. It says the
// order was reserved; what became of it is for its events to say.
func (o orderOutcomes) replayed() bool {
	return o.reserve == order.StatusCancelled || o.reserve == order.StatusFulfilled
}

// state is the state the order ends in: what an event made it, or what its reservation decided. A replay
// that no event bears out counts as reserved; while an event has no outcome, it is believed.
func (o orderOutcomes) state() order.Status {
	switch {
	case o.done != "":
		return o.done
	case o.replayed() && o.known:
		return order.StatusReserved
	}
	return o.reserve
}

// contradiction says how the outcomes contradict each other ("" when they do not): a rejected order that
// an event cancelled or fulfilled, or a replay that no event bears out.
func (o orderOutcomes) contradiction() string {
	switch {
	case o.done != "" && o.reserve == order.StatusRejected:
		return fmt.Sprintf("order %s was rejected, yet an event of it came back %s", o.id, o.done)
	case o.replayed() && o.known && o.done != o.reserve:
		return fmt.Sprintf("order %s came back %s, but no event of it did", o.id, o.reserve)
	}
	return ""
}

// target is the status of an order that an event of kind succeeded on.
func target(kind order.Type) order.Status {
	switch kind {
	case order.TypeCancel:
		return order.StatusCancelled
	case order.TypeFulfil:
		return order.StatusFulfilled
	}
	return order.StatusReserved
}

// reservedOnce: a reservation outcome of an order that was reserved, and may have been cancelled or
// fulfilled since (a redelivered reservation replays that).
func reservedOnce(st order.Status) bool {
	return slices.Contains([]order.Status{order.StatusReserved, order.StatusCancelled, order.StatusFulfilled}, st)
}

// sameReservation: two outcomes of one reservation agree, though one may replay the order as cancelled or
// fulfilled since.
func sameReservation(a, b order.Status) bool {
	return a == b || reservedOnce(a) && reservedOnce(b) && (a == order.StatusReserved || b == order.StatusReserved)
}

// outcomeProblems checks one outcome of event k of an order of lines: its status is one the event can
// have; with lines (a basket, a cancel or fulfil) it is all or nothing, and its lines are the order's.
func outcomeProblems(k eventKey, r order.Result, lines []order.Line) []string {
	if !fits(k.kind, r.Status) {
		return []string{fmt.Sprintf("%s came back %q", k, r.Status)}
	}
	if len(r.Lines) == 0 {
		return nil
	}
	var out []string
	if i := slices.IndexFunc(r.Lines, func(l order.LineResult) bool { return !allOrNothing(r.Status, l.Status) }); i >= 0 {
		out = append(out, fmt.Sprintf("%s is %s but its line %s is %s", k, r.Status, r.Lines[i].SKU, r.Lines[i].Status))
	}
	if got, want := resultLines(r.Lines), sortedLines(lines); !slices.Equal(got, want) {
		out = append(out, fmt.Sprintf("%s has the lines %v, its order %v", k, got, want))
	}
	return out
}

// fits: an outcome of an event of kind may have the status: refused (rejected), or done; a reservation
// may replay its order as since cancelled or fulfilled.
func fits(kind order.Type, st order.Status) bool {
	return st == order.StatusRejected || st == target(kind) || kind == order.TypeReserve && reservedOnce(st)
}

// allOrNothing: a line's status fits its order's. Every line of a reserved (cancelled, fulfilled) order
// is reserved (cancelled, fulfilled); no line of a rejected one is reserved.
func allOrNothing(whole, line order.Status) bool {
	if whole == order.StatusRejected {
		return line != order.StatusReserved
	}
	return line == whole
}

// resultLines are the SKUs and quantities of an outcome's lines.
func resultLines(results []order.LineResult) []order.Line {
	lines := make([]order.Line, len(results))
	for i, l := range results {
		lines[i] = order.Line{SKU: l.SKU, Quantity: l.Quantity}
	}
	return sortedLines(lines)
}

// sortedLines is a sorted copy of lines, as outcomes list them.
func sortedLines(lines []order.Line) []order.Line {
	return slices.SortedFunc(slices.Values(lines), func(a, b order.Line) int { return strings.Compare(a.SKU, b.SKU) })
}

// hold adds the lines of an order in its final state to what this run's orders hold of each SKU.
func (s *Summary) hold(lines []order.Line, state order.Status) {
	for _, l := range lines {
		sku := s.SKUs[l.SKU]
		if sku == nil {
			continue
		}
		switch state {
		case order.StatusReserved:
			sku.OrdersReserved += l.Quantity
		case order.StatusFulfilled:
			sku.OrdersFulfilled += l.Quantity
		case order.StatusRejected:
			sku.OrdersRejected++
		}
	}
}

// countLifecycle counts the outcome of a cancel or fulfil event (none when it has none).
func (s *Summary) countLifecycle(r order.Result) {
	switch r.Status {
	case order.StatusCancelled:
		s.Cancelled++
	case order.StatusFulfilled:
		s.Fulfilled++
	case order.StatusRejected:
		s.Refused++
		if s.RefusedBy == nil {
			s.RefusedBy = map[order.Reason]int{}
		}
		s.RefusedBy[r.Reason]++
	}
}

// countPublished counts the events placed: orders (baskets among them, and their lines), cancels and
// fulfils.
func (s *Summary) countPublished(placed map[eventKey]placedOrder) {
	s.Published = len(placed)
	for k, p := range placed {
		switch {
		case k.kind == order.TypeCancel:
			s.Cancels++
		case k.kind == order.TypeFulfil:
			s.Fulfils++
		case p.basket:
			s.Baskets++
			s.Lines += len(p.lines)
		}
	}
}
