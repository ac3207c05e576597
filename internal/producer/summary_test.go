package producer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/order"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sum          Summary
		wantProblems []string
		wantOutcomes int
	}{
		{
			name: "stock that moved by exactly what the outcomes reserved passes",
			sum: Summary{Reserved: 3, Rejected: 1, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 7, Reserved: 3, OrdersReserved: 3},
				"SKU-1": {Initial: 5, Available: 4, Reserved: 1, reservedBefore: 1, OrdersRejected: 1},
			}},
			wantOutcomes: 4,
		},
		{
			name: "the collector's count of distinct outcomes is kept",
			sum: Summary{Reserved: 3, Rejected: 1, Outcomes: 5, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 7, Reserved: 3, OrdersReserved: 3},
			}},
			wantOutcomes: 5,
		},
		{
			name:         "orders without an outcome are a problem",
			sum:          Summary{Reserved: 1, Missing: 2, SKUs: map[string]*SKUSummary{"SKU-0": {Initial: 3, Available: 2, Reserved: 1, OrdersReserved: 1}}},
			wantProblems: []string{"2 events have no outcome"},
			wantOutcomes: 1,
		},
		{
			name: "an oversold SKU is reported even when its stock adds up",
			sum: Summary{Reserved: 11, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: -1, Reserved: 11, OrdersReserved: 11},
			}},
			wantProblems: []string{"SKU-0: available -1 is negative (oversold)"},
			wantOutcomes: 11,
		},
		{
			name: "stock that vanished is reported",
			sum: Summary{Reserved: 3, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 5, Reserved: 3, OrdersReserved: 3},
			}},
			wantProblems: []string{"SKU-0: available fell by 5 but outcomes took 3"},
			wantOutcomes: 3,
		},
		{
			name: "reserved stock that grew by more than the outcomes reserved is reported",
			sum: Summary{Reserved: 3, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 4, Reserved: 6, reservedBefore: 2, OrdersReserved: 3},
			}},
			wantProblems: []string{"SKU-0: available fell by 4 but outcomes took 3", "SKU-0: reserved grew by 4 but outcomes reserved 3"},
			wantOutcomes: 3,
		},
		{
			name: "problems come by SKU, SKU-2 before SKU-10, after the missing orders",
			sum: Summary{Missing: 1, SKUs: map[string]*SKUSummary{
				"SKU-10": {Initial: 1, Available: 0},
				"SKU-2":  {Initial: 1, Available: 0},
				"SKU-3":  {Initial: 1, Available: 1},
			}},
			wantProblems: []string{"1 events have no outcome", "SKU-2: available fell by 1 but outcomes took 0",
				"SKU-10: available fell by 1 but outcomes took 0"},
		},
		{
			name: "fulfilled and still reserved orders that took exactly what the stock lost pass",
			sum: Summary{Reserved: 5, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 12, Available: 2, Reserved: 4, Fulfilled: 9, reservedBefore: 2, fulfilledBefore: 3,
					OrdersReserved: 2, OrdersFulfilled: 6},
			}},
			wantOutcomes: 5,
		},
		{
			name: "fulfilled stock that moved out of reserved without an order fulfilling it is reported",
			sum: Summary{Reserved: 2, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 8, Reserved: 0, Fulfilled: 2, OrdersReserved: 2},
			}},
			wantProblems: []string{"SKU-0: reserved grew by 0 but outcomes reserved 2", "SKU-0: fulfilled grew by 2 but outcomes fulfilled 0"},
			wantOutcomes: 2,
		},
		{
			name: "a cancelled order whose stock did not come back is reported",
			sum: Summary{Reserved: 1, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 9, Reserved: 1}, // the order holds nothing: it was cancelled
			}},
			wantProblems: []string{"SKU-0: available fell by 1 but outcomes took 0", "SKU-0: reserved grew by 1 but outcomes reserved 0"},
			wantOutcomes: 1,
		},
		{
			name: "a problem found while collecting fails the check",
			sum: Summary{Reserved: 1, Problems: []string{"order r-1 has outcomes reserved and rejected"}, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 1, Available: 0, Reserved: 1, OrdersReserved: 1},
			}},
			wantProblems: []string{"order r-1 has outcomes reserved and rejected"},
			wantOutcomes: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.sum
			s.check()
			if !slices.Equal(s.Problems, tc.wantProblems) {
				t.Errorf("problems %q, want %q", s.Problems, tc.wantProblems)
			}
			if s.Consistent != (len(tc.wantProblems) == 0) {
				t.Errorf("consistent %v with problems %q", s.Consistent, s.Problems)
			}
			if s.Outcomes != tc.wantOutcomes {
				t.Errorf("outcomes %d, want %d", s.Outcomes, tc.wantOutcomes)
			}
		})
	}
}

func TestPrint(t *testing.T) {
	s := &Summary{RunID: "r1", Orders: 30, Published: 30, Reserved: 20, Rejected: 8, Poisoned: 1, Missing: 1,
		Outcomes: 28, Duplicates: 2, LatencyP50: 1234567 * time.Nanosecond, LatencyP99: 5 * time.Millisecond,
		Throughput: 99.6, LockWait: LockWait{P50: 0.5, P95: 1.25, P99: 2, Max: 3.456, HotSKUs: []string{"SKU-3", "SKU-0"}},
		SKUs: map[string]*SKUSummary{}, Problems: []string{"1 orders have no outcome", "SKU-0: oops"}}
	for i := range 22 {
		s.SKUs[fmt.Sprint("SKU-", i)] = &SKUSummary{Initial: int64(i), Available: 1, Reserved: 2, OrdersReserved: 3, OrdersRejected: 4}
	}
	s.SKUs["SKU-3"].LockWaitMs, s.SKUs["SKU-0"].LockWaitMs = 12400, 7600

	var b strings.Builder
	s.Print(&b)
	rows := ""
	for i := range 20 {
		rows += fmt.Sprintf("%-16s %10d %10d %10d %12d %15d\n", fmt.Sprint("SKU-", i), i, 1, 2, 3, 4)
	}
	want := "run r1: 30 orders published\n" +
		"orders: 20 reserved, 8 rejected\n" +
		"events (orders, cancels, fulfils): 28 decided, 1 poisoned, 1 missing, 2 duplicate outcomes\n" +
		"end-to-end latency of an event: p50 1.235ms, p99 5ms; 100 events decided/s\n" +
		"lock wait (ms) of an event: p50 0.50, p95 1.25, p99 2.00, max 3.46\n" +
		"most lock wait, the waits of the SKU's events added up: SKU-3 12.4 s, SKU-0 7.6 s\n" +
		"sku                 initial  available   reserved run reserved orders rejected\n" +
		rows +
		"... 2 more SKUs\n"
	if got := b.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "consistency check: FAIL\n  1 orders have no outcome\n  SKU-0: oops\n") {
		t.Errorf("printed\n%s\nwant it to start with\n%s\nand end with the failed check", got, want)
	}
	for _, legend := range []string{"initial = available + reserved before the run", "run reserved: what this run's orders hold at the end",
		"a basket counts for each of its SKUs, so the\n  column can add up to more than the 8 rejected orders", "latency: from an event's placed_at"} {
		if !strings.Contains(b.String(), legend) {
			t.Errorf("the legend lacks %q:\n%s", legend, b.String())
		}
	}

	s.Consistent, s.LockWait.HotSKUs = true, nil
	s.SKUs = map[string]*SKUSummary{"SKU-0": {Initial: 1, Available: 1}}
	b.Reset()
	s.Print(&b)
	lastRow := fmt.Sprintf("%-16s %10d %10d %10d %12d %15d\n", "SKU-0", 1, 1, 0, 0, 0)
	if got := b.String(); strings.Contains(got, "most lock wait") || strings.Contains(got, "more SKUs") ||
		!strings.Contains(got, lastRow) || !strings.HasSuffix(got, "consistency check: PASS\n") {
		t.Errorf("a passing run with one SKU and no lock wait printed\n%s", got)
	}
}

func TestPrintBasketsAndLifecycleEvents(t *testing.T) {
	s := &Summary{RunID: "r2", Orders: 10, Published: 14, Baskets: 10, Lines: 25, Cancels: 3, Fulfils: 1, Reserved: 8,
		Rejected: 2, Cancelled: 2, Fulfilled: 1, Refused: 1, Outcomes: 14, Consistent: true,
		RefusedBy: map[order.Reason]int{order.ReasonUnknownOrder: 1},
		SKUs:      map[string]*SKUSummary{"SKU-0": {Initial: 9, Available: 1, Reserved: 6, Fulfilled: 2, OrdersReserved: 6, OrdersFulfilled: 2, OrdersRejected: 2}}}
	var b strings.Builder
	s.Print(&b)
	for _, want := range []string{
		"run r2: 10 orders published (10 baskets of 25 lines), 3 cancel and 1 fulfil events\n",
		"orders: 8 reserved, 2 rejected (a basket is one order)\n" +
			"events (orders, cancels, fulfils): 14 decided, 0 poisoned, 0 missing, 0 duplicate outcomes\n" +
			"lifecycle: 2 cancelled, 1 fulfilled, 1 refused (unknown_order 1)\n",
		"sku                 initial  available   reserved  fulfilled run reserved run fulfilled orders rejected\n" +
			"SKU-0                     9          1          6          2            6             2               2\n",
		"available, reserved, fulfilled: the\n  SKU's stock now", "run reserved and fulfilled: what this run's orders hold",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed\n%s\nwant it to hold\n%s", b.String(), want)
		}
	}
	if got := s.PublishedText(); got != "10 orders published (10 baskets of 25 lines), 3 cancel and 1 fulfil events" {
		t.Errorf("PublishedText() = %q", got)
	}
}
