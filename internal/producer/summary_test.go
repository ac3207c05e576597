package producer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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
			wantProblems: []string{"2 orders have no outcome"},
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
			wantProblems: []string{"SKU-0: available 5 + reserved 3 != initial 10"},
			wantOutcomes: 3,
		},
		{
			name: "reserved stock that grew by more than the outcomes reserved is reported",
			sum: Summary{Reserved: 3, SKUs: map[string]*SKUSummary{
				"SKU-0": {Initial: 10, Available: 4, Reserved: 6, reservedBefore: 2, OrdersReserved: 3},
			}},
			wantProblems: []string{"SKU-0: reserved grew by 4 but outcomes reserved 3"},
			wantOutcomes: 3,
		},
		{
			name: "problems come by SKU, SKU-2 before SKU-10, after the missing orders",
			sum: Summary{Missing: 1, SKUs: map[string]*SKUSummary{
				"SKU-10": {Initial: 1, Available: 0},
				"SKU-2":  {Initial: 1, Available: 0},
				"SKU-3":  {Initial: 1, Available: 1},
			}},
			wantProblems: []string{"1 orders have no outcome", "SKU-2: available 0 + reserved 0 != initial 1",
				"SKU-10: available 0 + reserved 0 != initial 1"},
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
	s.SKUs["SKU-3"].LockWaitMs, s.SKUs["SKU-0"].LockWaitMs = 12.4, 7.6

	var b strings.Builder
	s.Print(&b)
	rows := ""
	for i := range 20 {
		rows += fmt.Sprintf("%-16s %10d %10d %10d %12d %10d\n", fmt.Sprint("SKU-", i), i, 1, 2, 3, 4)
	}
	want := "run r1: 30 orders published\n" +
		"outcomes: 20 reserved, 8 rejected, 1 poisoned, 1 missing; 28 distinct orders, 2 duplicate events\n" +
		"end-to-end latency: p50 1.235ms, p99 5ms; 100 orders/s\n" +
		"lock wait (ms): p50 0.50, p95 1.25, p99 2.00, max 3.46\n" +
		"most lock wait: SKU-3 (12 ms) SKU-0 (8 ms)\n" +
		"sku                 initial  available   reserved run reserved   rejected\n" +
		rows +
		"... 2 more SKUs\n" +
		"consistency check: FAIL\n  1 orders have no outcome\n  SKU-0: oops\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}

	s.Consistent, s.LockWait.HotSKUs = true, nil
	s.SKUs = map[string]*SKUSummary{"SKU-0": {Initial: 1, Available: 1}}
	b.Reset()
	s.Print(&b)
	lastRows := fmt.Sprintf("%-16s %10d %10d %10d %12d %10d\nconsistency check: PASS\n", "SKU-0", 1, 1, 0, 0, 0)
	if got := b.String(); strings.Contains(got, "most lock wait") || strings.Contains(got, "more SKUs") || !strings.HasSuffix(got, lastRows) {
		t.Errorf("a passing run with one SKU and no lock wait printed\n%s", got)
	}
}
