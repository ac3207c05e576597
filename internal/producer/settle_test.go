package producer

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

// scenario is a run in miniature: the events placed, the outcomes the workers published, and the stock
// of each SKU before and after.
type scenario struct {
	placed        map[eventKey]placedOrder
	outcomes      []order.Result
	before, after map[string]stock.Stock
}

// verdict runs the consistency check over the scenario, as Run does after the outcomes came in or the
// time ran out.
func (sc scenario) verdict() *Summary {
	sum := &Summary{SKUs: map[string]*SKUSummary{}}
	for sku, st := range sc.before {
		sum.SKUs[sku] = &SKUSummary{Initial: st.Available + st.Reserved, reservedBefore: st.Reserved, fulfilledBefore: st.Fulfilled}
	}
	sum.countPublished(sc.placed)
	c := newCollector(Config{Config: stream.DefaultConfig()}, sum, sc.placed, newBar(nil, "", 0))
	msgs := make([]redis.XMessage, len(sc.outcomes))
	for i, r := range sc.outcomes {
		payload, _ := json.Marshal(r)
		msgs[i] = redis.XMessage{ID: "1-0", Values: map[string]any{"payload": string(payload)}}
	}
	c.add([]redis.XStream{{Stream: "order-results", Messages: msgs}})
	sum.Missing = c.pending()
	c.settle()
	for sku, st := range sc.after {
		sum.SKUs[sku].Available, sum.SKUs[sku].Reserved, sum.SKUs[sku].Fulfilled = st.Available, st.Reserved, st.Fulfilled
	}
	sum.check()
	return sum
}

func ln(sku string, qty int64) order.Line { return order.Line{SKU: sku, Quantity: qty} }

func basket(lines ...order.Line) placedOrder { return placedOrder{lines: lines, basket: true} }

func reserveKey(id string) eventKey { return eventKey{order.TypeReserve, id} }
func cancelKey(id string) eventKey  { return eventKey{order.TypeCancel, id} }
func fulfilKey(id string) eventKey  { return eventKey{order.TypeFulfil, id} }

// decided is the outcome of event k with every line in status, as a worker reports a basket's, a
// cancel's or a fulfil's.
func decided(k eventKey, status order.Status, lines ...order.Line) order.Result {
	r := order.Result{OrderID: k.orderID, Status: status}
	if k.kind != order.TypeReserve {
		r.Type = k.kind
	}
	for _, l := range lines {
		r.Lines = append(r.Lines, order.LineResult{SKU: l.SKU, Quantity: l.Quantity, Status: status})
		r.Quantity += l.Quantity
	}
	return r
}

// baseScenario: SKUs A, B and C with 10 available each, and five orders.
//
//	o-1 basket A×2 B×1, reserved: stays reserved
//	o-2 basket B×3 C×1, reserved, then cancelled
//	o-3 basket A×1 C×2, reserved, then fulfilled
//	o-4 basket A×1 B×20, rejected by B
//	o-5 single B×1, reserved; its cancel came before it was decided: refused as unknown_order
func baseScenario() scenario {
	rejected := decided(reserveKey("o-4"), order.StatusRejected, ln("A", 1), ln("B", 20))
	rejected.SKU, rejected.Reason = "B", order.ReasonInsufficientStock
	rejected.Lines[0].Reason, rejected.Lines[1].Reason = order.ReasonOtherLine, order.ReasonInsufficientStock
	return scenario{
		placed: map[eventKey]placedOrder{
			reserveKey("o-1"): basket(ln("B", 1), ln("A", 2)), // published unsorted
			reserveKey("o-2"): basket(ln("B", 3), ln("C", 1)),
			cancelKey("o-2"):  {sku: "C"},
			reserveKey("o-3"): basket(ln("C", 2), ln("A", 1)),
			fulfilKey("o-3"):  {sku: "A"},
			reserveKey("o-4"): basket(ln("A", 1), ln("B", 20)),
			reserveKey("o-5"): {lines: []order.Line{ln("B", 1)}, sku: "B"},
			cancelKey("o-5"):  {sku: "B"},
		},
		outcomes: []order.Result{
			decided(reserveKey("o-1"), order.StatusReserved, ln("A", 2), ln("B", 1)),
			decided(reserveKey("o-2"), order.StatusReserved, ln("B", 3), ln("C", 1)),
			decided(cancelKey("o-2"), order.StatusCancelled, ln("B", 3), ln("C", 1)),
			decided(reserveKey("o-3"), order.StatusReserved, ln("A", 1), ln("C", 2)),
			decided(fulfilKey("o-3"), order.StatusFulfilled, ln("A", 1), ln("C", 2)),
			rejected,
			{OrderID: "o-5", SKU: "B", Quantity: 1, Status: order.StatusReserved},
			{Type: order.TypeCancel, OrderID: "o-5", SKU: "B", Status: order.StatusRejected, Reason: order.ReasonUnknownOrder},
		},
		before: map[string]stock.Stock{"A": {Available: 10}, "B": {Available: 10}, "C": {Available: 10}},
		after: map[string]stock.Stock{
			"A": {Available: 7, Reserved: 2, Fulfilled: 1}, // o-1 reserved 2, o-3 fulfilled 1
			"B": {Available: 8, Reserved: 2},               // o-1 and o-5 reserved 1 each
			"C": {Available: 8, Fulfilled: 2},              // o-3 fulfilled 2
		},
	}
}

func TestConsistencyCheckOfBasketsAndLifecycleEvents(t *testing.T) {
	for _, tc := range []struct {
		name         string
		change       func(sc *scenario)
		wantProblems []string
	}{
		{
			name:   "stock that moved by exactly the lines of the orders' final states passes",
			change: func(*scenario) {},
		},
		{
			name:         "a reserved basket with a line rejected breaks all-or-nothing",
			change:       func(sc *scenario) { sc.outcomes[0].Lines[1].Status = order.StatusRejected },
			wantProblems: []string{"order o-1 is reserved but its line B is rejected"},
		},
		{
			name:         "a rejected basket with a line reserved breaks all-or-nothing",
			change:       func(sc *scenario) { sc.outcomes[5].Lines[0].Status = order.StatusReserved },
			wantProblems: []string{"order o-4 is rejected but its line A is reserved"},
		},
		{
			name:         "a cancel that left a line reserved breaks all-or-nothing",
			change:       func(sc *scenario) { sc.outcomes[2].Lines[1].Status = order.StatusReserved },
			wantProblems: []string{"cancel of order o-2 is cancelled but its line C is reserved"},
		},
		{
			name:         "an outcome whose lines are not its order's is reported",
			change:       func(sc *scenario) { sc.outcomes[0].Lines[0].Quantity = 3 },
			wantProblems: []string{"order o-1 has the lines [{A 3} {B 1}], its order [{A 2} {B 1}]"},
		},
		{
			name:   "a SKU that lost a unit no order holds is reported",
			change: func(sc *scenario) { sc.after["A"] = stock.Stock{Available: 6, Reserved: 3, Fulfilled: 1} },
			wantProblems: []string{"A: available fell by 4 but outcomes took 3",
				"A: reserved grew by 3 but outcomes reserved 2"},
		},
		{
			name: "a cancel that came back cancelled while the stock stayed reserved is reported",
			change: func(sc *scenario) {
				sc.after["B"] = stock.Stock{Available: 5, Reserved: 5}
				sc.after["C"] = stock.Stock{Available: 7, Reserved: 1, Fulfilled: 2}
			},
			wantProblems: []string{"B: available fell by 5 but outcomes took 2", "B: reserved grew by 5 but outcomes reserved 2",
				"C: available fell by 3 but outcomes took 2", "C: reserved grew by 1 but outcomes reserved 0"},
		},
		{
			name: "a fulfil that came back fulfilled while the stock stayed reserved is reported",
			change: func(sc *scenario) {
				sc.after["A"] = stock.Stock{Available: 7, Reserved: 3}
				sc.after["C"] = stock.Stock{Available: 8, Reserved: 2}
			},
			wantProblems: []string{"A: reserved grew by 3 but outcomes reserved 2", "A: fulfilled grew by 0 but outcomes fulfilled 1",
				"C: reserved grew by 2 but outcomes reserved 0", "C: fulfilled grew by 0 but outcomes fulfilled 2"},
		},
		{
			name: "an oversold SKU is reported",
			change: func(sc *scenario) {
				sc.before["B"] = stock.Stock{Available: 1}
				sc.after["B"] = stock.Stock{Available: -1, Reserved: 2}
			},
			wantProblems: []string{"B: available -1 is negative (oversold)"},
		},
		{
			name: "a reservation redelivered after its cancel replays it as cancelled: a duplicate, not a contradiction",
			change: func(sc *scenario) {
				sc.outcomes = append(sc.outcomes, decided(reserveKey("o-2"), order.StatusCancelled, ln("B", 3), ln("C", 1)))
			},
		},
		{
			name: "a reservation replayed as fulfilled that no fulfil did is reported",
			change: func(sc *scenario) {
				sc.outcomes = append(sc.outcomes, decided(reserveKey("o-1"), order.StatusFulfilled, ln("A", 2), ln("B", 1)))
			},
			wantProblems: []string{"order o-1 came back fulfilled, but no event of it did"},
		},
		{
			name: "a cancel refused before its order was decided and done by its redelivery counts as done",
			change: func(sc *scenario) {
				sc.outcomes = append(sc.outcomes, decided(cancelKey("o-5"), order.StatusCancelled, ln("B", 1)))
				sc.after["B"] = stock.Stock{Available: 9, Reserved: 1}
			},
		},
		{
			name: "a cancel done and then refused is reported",
			change: func(sc *scenario) {
				sc.outcomes = append(sc.outcomes, order.Result{Type: order.TypeCancel, OrderID: "o-2", SKU: "C",
					Status: order.StatusRejected, Reason: order.ReasonUnknownOrder})
			},
			wantProblems: []string{"cancel of order o-2 has outcomes cancelled and rejected"},
		},
		{
			name: "a reservation whose outcomes disagree is reported",
			change: func(sc *scenario) {
				sc.outcomes = append(sc.outcomes, decided(reserveKey("o-4"), order.StatusReserved, ln("A", 1), ln("B", 20)))
			},
			wantProblems: []string{"order o-4 has outcomes rejected and reserved"},
		},
		{
			name: "a rejected order that a cancel says it cancelled is reported",
			change: func(sc *scenario) {
				sc.placed[cancelKey("o-4")] = placedOrder{sku: "A"}
				sc.outcomes = append(sc.outcomes, decided(cancelKey("o-4"), order.StatusCancelled, ln("A", 1), ln("B", 20)))
			},
			wantProblems: []string{"order o-4 was rejected, yet an event of it came back cancelled"},
		},
		{
			name:         "a cancel that came back fulfilled is reported",
			change:       func(sc *scenario) { sc.outcomes[2].Status = order.StatusFulfilled },
			wantProblems: []string{`cancel of order o-2 came back "fulfilled"`, "B: available fell by 2 but outcomes took 5", "B: reserved grew by 2 but outcomes reserved 5", "C: available fell by 2 but outcomes took 3", "C: reserved grew by 0 but outcomes reserved 1"},
		},
		{
			name:   "a fulfil without an outcome is missing, and its order counts as reserved",
			change: func(sc *scenario) { sc.outcomes = slices.Delete(sc.outcomes, 4, 5) },
			wantProblems: []string{"1 events have no outcome",
				"A: reserved grew by 2 but outcomes reserved 3", "A: fulfilled grew by 1 but outcomes fulfilled 0",
				"C: reserved grew by 0 but outcomes reserved 2", "C: fulfilled grew by 2 but outcomes fulfilled 0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := baseScenario()
			tc.change(&sc)
			sum := sc.verdict()
			if !slices.Equal(sum.Problems, tc.wantProblems) {
				t.Errorf("problems\n%q\nwant\n%q", sum.Problems, tc.wantProblems)
			}
			if sum.Consistent != (len(tc.wantProblems) == 0) {
				t.Errorf("consistent %v with problems %q", sum.Consistent, sum.Problems)
			}
		})
	}
}

func TestSettleCountsBasketsAndLifecycleEvents(t *testing.T) {
	sum := baseScenario().verdict()
	want := Summary{Published: 8, Baskets: 4, Lines: 8, Cancels: 2, Fulfils: 1, Reserved: 4, Rejected: 1,
		Cancelled: 1, Fulfilled: 1, Refused: 1, Outcomes: 8}
	got := Summary{Published: sum.Published, Baskets: sum.Baskets, Lines: sum.Lines, Cancels: sum.Cancels, Fulfils: sum.Fulfils,
		Reserved: sum.Reserved, Rejected: sum.Rejected, Cancelled: sum.Cancelled, Fulfilled: sum.Fulfilled, Refused: sum.Refused,
		Outcomes: sum.Outcomes}
	if !equalSummaries(got, want) {
		t.Errorf("counted %+v\nwant %+v", got, want)
	}
	if want := map[order.Reason]int{order.ReasonUnknownOrder: 1}; !maps.Equal(sum.RefusedBy, want) {
		t.Errorf("refused by %v, want %v", sum.RefusedBy, want)
	}
	wantHeld := map[string][3]int64{"A": {2, 1, 1}, "B": {2, 0, 1}, "C": {0, 2, 0}} // reserved, fulfilled, rejected
	for sku, w := range wantHeld {
		k := sum.SKUs[sku]
		if got := [3]int64{k.OrdersReserved, k.OrdersFulfilled, k.OrdersRejected}; got != w {
			t.Errorf("%s holds %v (reserved, fulfilled, rejected orders), want %v", sku, got, w)
		}
	}
	// Every event of a basket counts as decided for each of its SKUs: A has o-1, o-3 and its fulfil, o-4.
	if n := sum.SKUs["A"].DecidedBy[""]; n != 4 {
		t.Errorf("A decided %d times, want 4", n)
	}
}

func equalSummaries(a, b Summary) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
