package producer

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Summary is what a producer run with --wait observed.
type Summary struct {
	RunID      string        `json:"run_id"`
	Orders     int           `json:"orders"`
	Published  int           `json:"published"`
	Reserved   int           `json:"reserved"`
	Rejected   int           `json:"rejected"`
	Poisoned   int           `json:"poisoned"`
	Outcomes   int           `json:"distinct_outcomes"` // orders with at least one outcome event
	Duplicates int           `json:"duplicate_outcomes"`
	Missing    int           `json:"missing"`
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	// Throughput is outcomes per second, from the first order placed to the last outcome.
	Throughput float64                `json:"orders_per_second"`
	LockWait   LockWait               `json:"lock_wait"`
	SKUs       map[string]*SKUSummary `json:"skus"`
	Problems   []string               `json:"problems"` // empty when the consistency check passed
	Consistent bool                   `json:"consistent"`
}

// SKUSummary is one SKU's stock before and after, and what this run's outcomes say about it.
type SKUSummary struct {
	Initial        int64   `json:"initial"` // available + reserved before the run
	Available      int64   `json:"available"`
	Reserved       int64   `json:"reserved"`
	OrdersReserved int64   `json:"orders_reserved"` // quantity reserved by this run's outcomes
	OrdersRejected int64   `json:"orders_rejected"` // orders rejected
	LockWaitMs     float64 `json:"lock_wait_ms"`    // total lock wait of this run's orders
	// DecidedBy counts this run's orders by the worker that decided them: how a hot SKU was shared.
	DecidedBy      map[string]int `json:"decided_by"`
	reservedBefore int64
}

// Busiest returns the SKU with the most orders decided in this run (an empty summary when there is none).
func (s *Summary) Busiest() *SKUSummary {
	busiest, most := &SKUSummary{}, -1
	for _, sku := range s.skuNames() {
		k := s.SKUs[sku]
		n := 0
		for _, decided := range k.DecidedBy {
			n += decided
		}
		if n > most {
			busiest, most = k, n
		}
	}
	return busiest
}

// BusiestShare is the largest share of the SKU's orders that one worker decided, 0 with none decided.
func (k *SKUSummary) BusiestShare() float64 {
	most, all := 0, 0
	for _, n := range k.DecidedBy {
		most, all = max(most, n), all+n
	}
	if all == 0 {
		return 0
	}
	return float64(most) / float64(all)
}

// LockWait summarises how long the orders waited for their SKU lock, as the workers recorded it in the
// outcome events.
type LockWait struct {
	P50, P95, P99, Max float64  `json:",omitzero"` // milliseconds
	HotSKUs            []string `json:"hot_skus"`  // the 5 SKUs with the most total wait, most first
}

// check verifies, for every SKU, initial = available + reserved and that the reserved stock grew by exactly
// what this run's outcomes reserved; and that every order got an outcome.
func (s *Summary) check() {
	if s.Outcomes == 0 {
		s.Outcomes = s.Reserved + s.Rejected
	}
	if s.Missing > 0 {
		s.Problems = append(s.Problems, fmt.Sprintf("%d orders have no outcome", s.Missing))
	}
	for _, sku := range s.skuNames() {
		s.Problems = append(s.Problems, s.SKUs[sku].problems(sku)...)
	}
	s.Consistent = len(s.Problems) == 0
}

// problems lists what does not add up in the stock of sku.
func (k *SKUSummary) problems(sku string) []string {
	var out []string
	if k.Available < 0 {
		out = append(out, fmt.Sprintf("%s: available %d is negative (oversold)", sku, k.Available))
	}
	if k.Available+k.Reserved != k.Initial {
		out = append(out, fmt.Sprintf("%s: available %d + reserved %d != initial %d", sku, k.Available, k.Reserved, k.Initial))
	}
	if got := k.Reserved - k.reservedBefore; got != k.OrdersReserved {
		out = append(out, fmt.Sprintf("%s: reserved grew by %d but outcomes reserved %d", sku, got, k.OrdersReserved))
	}
	return out
}

func (s *Summary) skuNames() []string {
	names := make([]string, 0, len(s.SKUs))
	for n := range s.SKUs {
		names = append(names, n)
	}
	// SKU-2 before SKU-10.
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	return names
}

// Print writes the summary as a table.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "run %s: %d orders published\n", s.RunID, s.Published)
	fmt.Fprintf(w, "outcomes: %d reserved, %d rejected, %d poisoned, %d missing; %d distinct orders, %d duplicate events\n",
		s.Reserved, s.Rejected, s.Poisoned, s.Missing, s.Outcomes, s.Duplicates)
	fmt.Fprintf(w, "end-to-end latency: p50 %v, p99 %v; %.0f orders/s\n", s.LatencyP50.Round(time.Microsecond),
		s.LatencyP99.Round(time.Microsecond), s.Throughput)
	fmt.Fprintf(w, "lock wait (ms): p50 %.2f, p95 %.2f, p99 %.2f, max %.2f\n", s.LockWait.P50, s.LockWait.P95, s.LockWait.P99, s.LockWait.Max)
	s.printHotSKUs(w)
	s.printStock(w)
	if s.Consistent {
		fmt.Fprintln(w, "consistency check: PASS")
		return
	}
	fmt.Fprintf(w, "consistency check: FAIL\n  %s\n", strings.Join(s.Problems, "\n  "))
}

// printHotSKUs writes the SKUs with the most lock wait on one line, if any waited.
func (s *Summary) printHotSKUs(w io.Writer) {
	if len(s.LockWait.HotSKUs) == 0 {
		return
	}
	fmt.Fprintf(w, "most lock wait:")
	for _, sku := range s.LockWait.HotSKUs {
		fmt.Fprintf(w, " %s (%.0f ms)", sku, s.SKUs[sku].LockWaitMs)
	}
	fmt.Fprintln(w)
}

// printStock writes the stock table, a row per SKU up to 20 of them.
func (s *Summary) printStock(w io.Writer) {
	const maxRows = 20
	names := s.skuNames()
	fmt.Fprintf(w, "%-16s %10s %10s %10s %12s %10s\n", "sku", "initial", "available", "reserved", "run reserved", "rejected")
	for _, n := range names[:min(len(names), maxRows)] {
		k := s.SKUs[n]
		fmt.Fprintf(w, "%-16s %10d %10d %10d %12d %10d\n", n, k.Initial, k.Available, k.Reserved, k.OrdersReserved, k.OrdersRejected)
	}
	if len(names) > maxRows {
		fmt.Fprintf(w, "... %d more SKUs\n", len(names)-maxRows)
	}
}
