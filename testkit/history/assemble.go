package history

import (
	"cmp"
	"fmt"
	"slices"
)

// assemble pairs invocations with their ends and acquisitions with their releases. Ends are matched
// after every invocation is known, so the files may be given in any order.
func assemble(recs []located) (History, error) {
	var h History
	ops := make(map[string]int) // op id -> index in h.Ops
	for i := range recs {
		if err := h.start(ops, &recs[i]); err != nil {
			return History{}, err
		}
	}
	open := openHolds(h.Holds)
	for i := range recs {
		if err := h.end(ops, open, &recs[i]); err != nil {
			return History{}, err
		}
	}
	for i := range h.Ops {
		if op := &h.Ops[i]; op.Failure == "" && op.Returned.IsZero() {
			op.Failure, op.Error = Unknown, "no return recorded"
		}
	}
	slices.SortStableFunc(h.Ops, func(a, b Op) int { return a.Invoked.Compare(b.Invoked) })
	slices.SortStableFunc(h.Holds, func(a, b Hold) int { return a.Acquired.Compare(b.Acquired) })
	return h, nil
}

// start adds the operation or hold that rec begins.
func (h *History) start(ops map[string]int, rec *located) error {
	switch rec.Event {
	case "invoke":
		if i, dup := ops[rec.Op]; dup {
			return fmt.Errorf("history: %s: op %q was already invoked at %s", rec.src, rec.Op, h.Ops[i].Source)
		}
		ops[rec.Op] = len(h.Ops)
		h.Ops = append(h.Ops, Op{ID: rec.Op, Worker: rec.Worker, Kind: rec.Kind, SKU: rec.SKU, OrderID: rec.Order,
			Quantity: rec.Quantity, Token: rec.Token, Invoked: rec.Time, Source: rec.src})
	case "acquired":
		h.Holds = append(h.Holds, Hold{Key: rec.Key, Owner: rec.Owner, Worker: rec.Worker, Token: rec.Token,
			Invoked: rec.Invoked, Acquired: rec.Time, Source: rec.src})
	}
	return nil
}

// end records the return, failure or release that rec holds.
func (h *History) end(ops map[string]int, open map[holdKey][]int, rec *located) error {
	switch rec.Event {
	case "return", "fail":
		i, ok := ops[rec.Op]
		if !ok {
			return fmt.Errorf("history: %s: %s of op %q, which was never invoked", rec.src, rec.Event, rec.Op)
		}
		return endOp(&h.Ops[i], rec)
	case "released":
		k := holdKey{rec.Key, rec.Owner, rec.Token}
		held := open[k]
		if len(held) == 0 {
			return fmt.Errorf("history: %s: release of %s by %s with token %d matches no open acquisition",
				rec.src, rec.Key, rec.Owner, rec.Token)
		}
		h.Holds[held[len(held)-1]].Released = rec.Time
		open[k] = held[:len(held)-1]
	}
	return nil
}

func endOp(op *Op, rec *located) error {
	switch {
	case !op.Returned.IsZero():
		return fmt.Errorf("history: %s: second %s of op %q (invoked at %s)", rec.src, rec.Event, rec.Op, op.Source)
	case rec.Time.Before(op.Invoked):
		return fmt.Errorf("history: %s: op %q ends at %v, before its invocation at %v (%s)", rec.src, rec.Op,
			rec.Time, op.Invoked, op.Source)
	}
	op.Returned = rec.Time
	if rec.Event == "fail" {
		op.Failure, op.Error = rec.Failure, rec.Error
		return nil
	}
	op.Result = Result{Status: rec.Status, Reason: rec.Reason, Quantity: rec.Quantity,
		AvailableAfter: rec.AvailableAfter, Replayed: rec.Replayed}
	op.Token = cmp.Or(op.Token, rec.Token) // the token an elided write was decided under (returnEvent)
	return nil
}

// holdKey identifies a hold for its release. One owner may hold a key several times (reentry, with the
// same token); a release closes the latest.
type holdKey struct {
	key, owner string
	token      int64
}

// openHolds indexes holds by holdKey, in acquisition order (holds are still in file order here).
func openHolds(holds []Hold) map[holdKey][]int {
	open := make(map[holdKey][]int)
	for i, h := range holds {
		k := holdKey{h.Key, h.Owner, h.Token}
		open[k] = append(open[k], i)
	}
	return open
}
