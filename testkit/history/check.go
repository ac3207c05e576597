package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// DefaultTimeout bounds the linearizability search of one SKU when Check is given no timeout: 1 minute.
const DefaultTimeout = time.Minute

// Report is what Check found.
type Report struct {
	SKUs       []SKUReport // one per SKU that has operations, by SKU
	Violations []Violation // fencing violations, by SKU and time
	Ops, Holds int
	Truncated  []string // History.Truncated
}

// SKUReport is the linearizability check of one SKU's stock.
type SKUReport struct {
	SKU string
	// Result is porcupine.Ok, porcupine.Illegal, or porcupine.Unknown when the search timed out.
	Result porcupine.CheckResult
	// Checked operations went to porcupine, Unknown of them with an unknown outcome. Left out were the
	// Refused ones and the Moot ones: unknown attempts that cannot have changed anything (see selectOps).
	Checked, Unknown, Refused, Moot int
	// Stuck says, for an Illegal result, which operation no linearization could place and what the
	// model would have answered there.
	Stuck string

	model   skuModel
	info    porcupine.LinearizationInfo
	refused []*Op
	holds   []*Hold // of the SKU's lock, for the visualization
}

// OK reports whether every SKU is linearizable (a timed-out search is not) and no fencing rule broke.
func (r Report) OK() bool {
	for _, s := range r.SKUs {
		if s.Result != porcupine.Ok {
			return false
		}
	}
	return len(r.Violations) == 0
}

// Check checks h against the stock each SKU started with (a SKU missing from initial was never stocked:
// every reserve of it must be rejected as unknown_sku): the linearizability of each SKU's stock and the
// fencing rules. timeout bounds the search of each SKU; 0 means DefaultTimeout. SKUs are checked in
// parallel.
func Check(h History, initial map[string]int64, timeout time.Duration) Report {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	bySKU := make(map[string][]*Op)
	for i := range h.Ops {
		op := &h.Ops[i]
		bySKU[op.SKU] = append(bySKU[op.SKU], op)
	}
	skus := slices.Sorted(maps.Keys(bySKU))
	r := Report{SKUs: make([]SKUReport, len(skus)), Violations: checkFencing(h), Ops: len(h.Ops),
		Holds: len(h.Holds), Truncated: h.Truncated}
	forever := h.horizon().UnixNano() // the return time of operations whose outcome is unknown
	var wg sync.WaitGroup
	for i, sku := range skus {
		wg.Go(func() { r.SKUs[i] = checkSKU(sku, bySKU[sku], newModel(sku, initial), forever, timeout) })
	}
	wg.Wait()
	for i := range h.Holds {
		hold := &h.Holds[i]
		if j, ok := slices.BinarySearch(skus, hold.Key); ok {
			r.SKUs[j].holds = append(r.SKUs[j].holds, hold)
		}
	}
	return r
}

// horizon is just after the last time the history holds.
func (h History) horizon() time.Time {
	var last time.Time
	for i := range h.Ops {
		last = latest(last, h.Ops[i].Invoked, h.Ops[i].Returned)
	}
	for i := range h.Holds {
		last = latest(last, h.Holds[i].Acquired, h.Holds[i].Released)
	}
	return last.Add(time.Nanosecond)
}

func latest(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// checkSKU runs porcupine on the operations of one SKU.
func checkSKU(sku string, ops []*Op, m skuModel, forever int64, timeout time.Duration) SKUReport {
	rep := SKUReport{SKU: sku, model: m}
	slices.SortStableFunc(ops, func(a, b *Op) int { return a.Invoked.Compare(b.Invoked) })
	checked := rep.selectOps(ops)
	history := make([]porcupine.Operation, len(checked))
	lanes := lanes{byWorker: make(map[string][]int)}
	for i, op := range checked {
		ret := op.Returned.UnixNano()
		if op.Failure == Unknown {
			ret = forever // it may take effect at any time from its invocation on
		}
		call := op.Invoked.UnixNano()
		history[i] = porcupine.Operation{ClientId: lanes.assign(op.Worker, call, ret), Input: op, Output: op,
			Call: call, Return: ret, Metadata: op}
	}
	rep.Result, rep.info = porcupine.CheckOperationsVerbose(rep.model.forPorcupine(), history, timeout)
	if rep.Result == porcupine.Illegal {
		rep.Stuck = stuck(rep.model, rep.info, checked)
	}
	return rep
}

// selectOps returns the operations porcupine must see and counts the rest. Besides the refused
// operations it leaves out two kinds of unknown attempt that cannot have changed anything, because
// porcupine's search grows exponentially with the unknown operations pending at once:
//   - an attempt at an order that an operation of the same kind decided afresh (a reserve that returned
//     a decision not replayed, a release that released): had the attempt taken effect first, that
//     operation would have got a replay; after it, the attempt could only replay;
//   - a further attempt of the same kind, order and quantity: only the first of them to take effect could
//     change anything, and the earliest invoked can take effect wherever any of them could.
func (rep *SKUReport) selectOps(ops []*Op) []*Op {
	type attempt struct {
		kind     Kind
		order    string
		quantity int64
	}
	decided := freshlyDecided(ops)
	seen := make(map[attempt]bool)
	var checked []*Op
	for _, op := range ops {
		a := attempt{op.Kind, op.OrderID, op.Quantity}
		switch {
		case op.Failure == Refused:
			rep.Refused++
			rep.refused = append(rep.refused, op)
			continue
		case op.Failure == Unknown && (seen[a] || decided[kindOrder{op.Kind, op.OrderID}]):
			rep.Moot++
			continue
		case op.Failure == Unknown:
			seen[a] = true
			rep.Unknown++
		}
		checked = append(checked, op)
	}
	rep.Checked = len(checked)
	rep.model.known = rep.Checked - rep.Unknown
	rep.model.tracked = seenTwice(checked)
	return checked
}

type kindOrder struct {
	kind  Kind
	order string
}

// freshlyDecided returns the orders and kinds that an operation returned a fresh decision for.
func freshlyDecided(ops []*Op) map[kindOrder]bool {
	decided := make(map[kindOrder]bool)
	for _, op := range ops {
		if op.Failure == "" && !op.Result.Replayed {
			decided[kindOrder{op.Kind, op.OrderID}] = true
		}
	}
	return decided
}

// seenTwice returns the orders that more than one operation is about.
func seenTwice(ops []*Op) map[string]bool {
	seen := make(map[string]bool)
	twice := make(map[string]bool)
	for _, op := range ops {
		if seen[op.OrderID] {
			twice[op.OrderID] = true
		}
		seen[op.OrderID] = true
	}
	return twice
}

// lanes gives each operation a row (porcupine's client id) in the visualization: each worker gets as
// many rows as it had operations in flight at once.
type lanes struct {
	byWorker map[string][]int
	busy     []int64 // by lane: when its last operation returns
}

func (l *lanes) assign(worker string, call, ret int64) int {
	for _, lane := range l.byWorker[worker] {
		if l.busy[lane] < call {
			l.busy[lane] = ret
			return lane
		}
	}
	l.busy = append(l.busy, ret)
	l.byWorker[worker] = append(l.byWorker[worker], len(l.busy)-1)
	return len(l.busy) - 1
}

// stuck explains an Illegal result: it replays the longest partial linearization porcupine found and
// names the operation that had to come next (the earliest return among those left) with what the model
// would have answered there.
func stuck(m skuModel, info porcupine.LinearizationInfo, ops []*Op) string {
	placed := longestPartial(info)
	s := m.init()
	for _, op := range placed {
		_, s, _ = m.apply(s, op)
	}
	next := firstUnplaced(ops, placed)
	if next == nil {
		return fmt.Sprintf("linearized %d of %d operations", len(placed), len(ops))
	}
	answer := "a refusal (the order is not reserved)"
	if want, _, ok := m.apply(s, next); ok {
		answer = want.String()
	}
	return fmt.Sprintf("linearized at most %d of %d operations; the next to return could not be placed:\n"+
		"      %s\n      after those the model has %s and would answer: %s", len(placed), len(ops), next, s, answer)
}

// longestPartial returns the operations of the longest partial linearization, in order.
func longestPartial(info porcupine.LinearizationInfo) []*Op {
	partials := info.PartialLinearizationsOperations()
	if len(partials) == 0 || len(partials[0]) == 0 {
		return nil
	}
	longest := slices.MaxFunc(partials[0], func(a, b []porcupine.Operation) int { return cmp.Compare(len(a), len(b)) })
	ops := make([]*Op, len(longest))
	for i, p := range longest {
		ops[i] = p.Input.(*Op)
	}
	return ops
}

// firstUnplaced returns the operation with a known outcome and the earliest return that is not placed.
func firstUnplaced(ops, placed []*Op) *Op {
	in := make(map[*Op]bool, len(placed))
	for _, op := range placed {
		in[op] = true
	}
	var next *Op
	for _, op := range ops {
		if !in[op] && op.Failure == "" && (next == nil || op.Returned.Before(next.Returned)) {
			next = op
		}
	}
	return next
}

// String is a readable summary: one line per SKU, then every fencing violation.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d operations on %d SKUs, %d lock holds", r.Ops, len(r.SKUs), r.Holds)
	if len(r.Truncated) > 0 {
		fmt.Fprintf(&b, "; truncated last lines left out: %s", strings.Join(r.Truncated, ", "))
	}
	for _, s := range r.SKUs {
		fmt.Fprintf(&b, "\n  %s: %s: %d operations checked (%d with unknown outcome), %d refused and %d moot "+
			"unknown attempts left out", s.SKU, s.Result, s.Checked, s.Unknown, s.Refused, s.Moot)
		if s.Stuck != "" {
			fmt.Fprintf(&b, "\n    %s", s.Stuck)
		}
	}
	fmt.Fprintf(&b, "\nfencing: %d violations", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  %s", v)
	}
	return b.String()
}
