package producer

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stockflow/stockflow/order"
)

// Summary is what a producer run with --wait observed.
type Summary struct {
	RunID  string `json:"run_id"`
	Orders int    `json:"orders"`
	Seeded int    `json:"seeded_skus"` // SKUs whose stock --seed-stock set
	// Published counts the events published: the orders, and the cancel and fulfil events of some.
	Published int `json:"published"`
	Baskets   int `json:"baskets"`           // orders with lines
	Lines     int `json:"basket_lines"`      // lines of the baskets
	Cancels   int `json:"cancels"`           // cancel events published
	Fulfils   int `json:"fulfils"`           // fulfil events published
	Reserved  int `json:"reserved"`          // orders reserved (replayed as since cancelled or fulfilled too); a basket is one
	Rejected  int `json:"rejected"`          // orders rejected; a basket is one
	Cancelled int `json:"cancelled"`         // orders a cancel event cancelled
	Fulfilled int `json:"fulfilled"`         // orders a fulfil event fulfilled
	Refused   int `json:"refused"`           // cancel and fulfil events refused (RefusedBy says why)
	Poisoned  int `json:"poisoned"`          // events sent to a poison stream
	Outcomes  int `json:"distinct_outcomes"` // events with at least one outcome event
	// Duplicates counts the outcome events after the first of an event.
	Duplicates int                  `json:"duplicate_outcomes"`
	Missing    int                  `json:"missing"` // events with neither an outcome nor a poison entry
	RefusedBy  map[order.Reason]int `json:"refused_by,omitempty"`
	LatencyP50 time.Duration        `json:"latency_p50_ns"`
	LatencyP99 time.Duration        `json:"latency_p99_ns"`
	// Throughput is outcomes per second, from the first event placed to the last outcome.
	Throughput float64                `json:"orders_per_second"`
	LockWait   LockWait               `json:"lock_wait"`
	SKUs       map[string]*SKUSummary `json:"skus"`
	Problems   []string               `json:"problems"` // empty when the consistency check passed
	Consistent bool                   `json:"consistent"`
}

// SKUSummary is one SKU's stock before and after, and what this run's orders hold of it in their final
// state.
type SKUSummary struct {
	Initial         int64   `json:"initial"` // available + reserved before the run
	Available       int64   `json:"available"`
	Reserved        int64   `json:"reserved"`
	Fulfilled       int64   `json:"fulfilled"`
	OrdersReserved  int64   `json:"orders_reserved"`  // quantity of this run's orders left reserved
	OrdersFulfilled int64   `json:"orders_fulfilled"` // quantity of this run's orders fulfilled
	OrdersRejected  int64   `json:"orders_rejected"`  // this run's rejected orders with a line of the SKU (a basket counts for each of its SKUs)
	LockWaitMs      float64 `json:"lock_wait_ms"`     // total lock wait of this run's events of the SKU
	// DecidedBy counts this run's events of the SKU (an order, a cancel or fulfil of it) by the worker that
	// decided them: how a hot SKU was shared. An event of a basket counts for each of its SKUs.
	DecidedBy       map[string]int `json:"decided_by"`
	reservedBefore  int64
	fulfilledBefore int64
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

// check verifies, for every SKU, that the stock moved by exactly what this run's orders hold in their
// final state: the available stock fell by their reserved and fulfilled lines (and is not negative), the
// reserved stock grew by the reserved lines, the fulfilled stock by the fulfilled ones (so nothing
// appeared or vanished); and that every event got an outcome.
func (s *Summary) check() {
	if s.Outcomes == 0 {
		s.Outcomes = s.Reserved + s.Rejected
	}
	if s.Missing > 0 {
		s.Problems = append(s.Problems, fmt.Sprintf("%d events have no outcome", s.Missing))
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
	if fell, took := k.Initial-k.reservedBefore-k.Available, k.OrdersReserved+k.OrdersFulfilled; fell != took {
		out = append(out, fmt.Sprintf("%s: available fell by %d but outcomes took %d", sku, fell, took))
	}
	if got := k.Reserved - k.reservedBefore; got != k.OrdersReserved {
		out = append(out, fmt.Sprintf("%s: reserved grew by %d but outcomes reserved %d", sku, got, k.OrdersReserved))
	}
	if got := k.Fulfilled - k.fulfilledBefore; got != k.OrdersFulfilled {
		out = append(out, fmt.Sprintf("%s: fulfilled grew by %d but outcomes fulfilled %d", sku, got, k.OrdersFulfilled))
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

// Print writes the summary as a table, with a legend that says what each figure counts.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "run %s: %s\n", s.RunID, s.PublishedText())
	basket := ""
	if s.Baskets > 0 {
		basket = " (a basket is one order)"
	}
	fmt.Fprintf(w, "orders: %d reserved, %d rejected%s\n", s.Reserved, s.Rejected, basket)
	fmt.Fprintf(w, "events (orders, cancels, fulfils): %d decided, %d poisoned, %d missing, %d duplicate outcomes\n",
		s.Outcomes, s.Poisoned, s.Missing, s.Duplicates)
	s.printLifecycle(w)
	fmt.Fprintf(w, "end-to-end latency of an event: p50 %v, p99 %v; %.0f events decided/s\n", s.LatencyP50.Round(time.Microsecond),
		s.LatencyP99.Round(time.Microsecond), s.Throughput)
	fmt.Fprintf(w, "lock wait (ms) of an event: p50 %.2f, p95 %.2f, p99 %.2f, max %.2f\n", s.LockWait.P50, s.LockWait.P95, s.LockWait.P99, s.LockWait.Max)
	s.printHotSKUs(w)
	s.printStock(w)
	s.printLegend(w)
	if s.Consistent {
		fmt.Fprintln(w, "consistency check: PASS")
		return
	}
	fmt.Fprintf(w, "consistency check: FAIL\n  %s\n", strings.Join(s.Problems, "\n  "))
}

// printLegend says what the stock table's columns and the latency count.
func (s *Summary) printLegend(w io.Writer) {
	fulfilled, runFulfilled := "", ""
	if s.Fulfils > 0 {
		fulfilled, runFulfilled = ", fulfilled", " and fulfilled"
	}
	fmt.Fprintf(w, `  stock columns, in units: initial = available + reserved before the run; available, reserved%s: the
  SKU's stock now (every run's orders); run reserved%s: what this run's orders hold at the end. orders
  rejected: this run's rejected orders with a line of the SKU; a basket counts for each of its SKUs, so the
  column can add up to more than the %d rejected orders.
  latency: from an event's placed_at (the producer's clock) to its outcome's processed_at (the worker's),
  its wait in the stream included: the producer publishes as fast as it can (unless --rate), so in a large
  run most of it is the wait behind the events published before, not the work on the event.
`, fulfilled, runFulfilled, s.Rejected)
	if len(s.LockWait.HotSKUs) > 0 {
		fmt.Fprintln(w, "  most lock wait: the waits of the SKU's events added up; they wait at the same time, so the sum can\n"+
			"  exceed the run's duration.")
	}
}

// PublishedText says what the run published: "1000 orders published", with its baskets and its cancel and
// fulfil events when it had any.
func (s *Summary) PublishedText() string {
	text := fmt.Sprintf("%d orders published", s.Published-s.Cancels-s.Fulfils)
	if s.Baskets > 0 {
		text += fmt.Sprintf(" (%d baskets of %d lines)", s.Baskets, s.Lines)
	}
	if s.Cancels+s.Fulfils > 0 {
		text += fmt.Sprintf(", %d cancel and %d fulfil events", s.Cancels, s.Fulfils)
	}
	return text
}

// printLifecycle writes what the cancel and fulfil events did, if the run published any.
func (s *Summary) printLifecycle(w io.Writer) {
	if s.Cancels+s.Fulfils == 0 {
		return
	}
	reasons := make([]string, 0, len(s.RefusedBy))
	for _, reason := range slices.Sorted(maps.Keys(s.RefusedBy)) {
		reasons = append(reasons, fmt.Sprintf("%s %d", reason, s.RefusedBy[reason]))
	}
	line := fmt.Sprintf("lifecycle: %d cancelled, %d fulfilled, %d refused", s.Cancelled, s.Fulfilled, s.Refused)
	if len(reasons) > 0 {
		line += " (" + strings.Join(reasons, ", ") + ")"
	}
	fmt.Fprintln(w, line)
}

// printHotSKUs writes the SKUs with the most lock wait on one line, if any waited: the sum of the waits of
// this run's events of the SKU, which wait at the same time, so it can exceed the run's duration.
func (s *Summary) printHotSKUs(w io.Writer) {
	if len(s.LockWait.HotSKUs) == 0 {
		return
	}
	hot := make([]string, len(s.LockWait.HotSKUs))
	for i, sku := range s.LockWait.HotSKUs {
		hot[i] = fmt.Sprintf("%s %.1f s", sku, s.SKUs[sku].LockWaitMs/1000)
	}
	fmt.Fprintf(w, "most lock wait, the waits of the SKU's events added up: %s\n", strings.Join(hot, ", "))
}

// printStock writes the stock table, a row per SKU up to 20 of them; with columns of the fulfilled stock
// when the run fulfilled any.
func (s *Summary) printStock(w io.Writer) {
	const maxRows = 20
	names := s.skuNames()
	wide := s.Fulfils > 0
	fmt.Fprintln(w, stockRow(wide, "sku", "initial", "available", "reserved", "fulfilled", "run reserved", "run fulfilled", "orders rejected"))
	for _, n := range names[:min(len(names), maxRows)] {
		k := s.SKUs[n]
		fmt.Fprintln(w, stockRow(wide, n, k.Initial, k.Available, k.Reserved, k.Fulfilled, k.OrdersReserved, k.OrdersFulfilled, k.OrdersRejected))
	}
	if len(names) > maxRows {
		fmt.Fprintf(w, "... %d more SKUs\n", len(names)-maxRows)
	}
}

// stockRow is a row of the stock table, of the cells sku, initial, available, reserved, fulfilled, run
// reserved, run fulfilled and orders rejected; without the fulfilled ones unless wide.
func stockRow(wide bool, cells ...any) string {
	if wide {
		return fmt.Sprintf("%-16v %10v %10v %10v %10v %12v %13v %15v", cells...)
	}
	return fmt.Sprintf("%-16v %10v %10v %10v %12v %15v", cells[0], cells[1], cells[2], cells[3], cells[5], cells[7])
}
