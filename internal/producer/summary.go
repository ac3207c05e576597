package producer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
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
	reservedBefore int64
}

// LockWait summarises how long the orders waited for their SKU lock, as the workers recorded it in the
// outcome events.
type LockWait struct {
	P50, P95, P99, Max float64  `json:",omitzero"` // milliseconds
	HotSKUs            []string `json:"hot_skus"`  // the 5 SKUs with the most total wait, most first
}

// collect reads this run's outcome and poison events until every order has one or the timeout passes.
func collect(ctx context.Context, cfg Config, rdb *redis.Client, sum *Summary, placed map[string]placedOrder,
	resultsFrom, poisonFrom string, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	bar := newBar(progress, "outcomes", len(placed))
	defer bar.done()
	seen := make(map[string]handlers.Result, len(placed))
	var latencies []time.Duration
	var waits []float64
	var first, last time.Time
	from := []string{resultsFrom, poisonFrom}
	for len(seen)+sum.Poisoned < len(placed) {
		streams, err := rdb.XRead(ctx, &redis.XReadArgs{
			Streams: []string{cfg.ResultsStream, cfg.PoisonStream, from[0], from[1]},
			Count:   1000, Block: 500 * time.Millisecond,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case ctx.Err() != nil:
			sum.Missing = len(placed) - len(seen) - sum.Poisoned
			return nil // reported by check
		case err != nil: // Redis restarting: keep trying until the timeout
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for _, s := range streams {
			poison := s.Stream == cfg.PoisonStream
			for _, e := range s.Messages {
				if poison {
					from[1] = e.ID
				} else {
					from[0] = e.ID
				}
				payload, _ := e.Values["payload"].(string)
				if poison {
					var o handlers.Order
					if json.Unmarshal([]byte(payload), &o) == nil {
						if _, ours := placed[o.OrderID]; ours {
							sum.Poisoned++
							bar.add(1)
						}
					}
					continue
				}
				var r handlers.Result
				if json.Unmarshal([]byte(payload), &r) != nil {
					continue
				}
				p, ours := placed[r.OrderID]
				if !ours {
					continue
				}
				if first, dup := seen[r.OrderID]; dup {
					sum.Duplicates++
					if first.Status != r.Status {
						sum.Problems = append(sum.Problems, fmt.Sprintf("order %s has outcomes %s and %s", r.OrderID, first.Status, r.Status))
					}
					continue
				}
				seen[r.OrderID] = r
				bar.add(1)
				latencies = append(latencies, r.ProcessedAt.Sub(p.placedAt))
				waits = append(waits, r.LockWaitMs)
				if first.IsZero() || p.placedAt.Before(first) {
					first = p.placedAt
				}
				if r.ProcessedAt.After(last) {
					last = r.ProcessedAt
				}
				s := sum.SKUs[r.SKU]
				s.LockWaitMs += r.LockWaitMs
				switch r.Status {
				case inventory.StatusReserved:
					sum.Reserved++
					s.OrdersReserved += r.Quantity
				case inventory.StatusRejected:
					sum.Rejected++
					s.OrdersRejected++
				}
			}
		}
	}
	sum.Outcomes = len(seen)
	if span := last.Sub(first).Seconds(); span > 0 {
		sum.Throughput = float64(len(seen)) / span
	}
	slices.Sort(latencies)
	sum.LatencyP50, sum.LatencyP99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	sum.LockWait = lockWait(waits, sum.SKUs)
	return nil
}

func lockWait(waits []float64, skus map[string]*SKUSummary) LockWait {
	slices.Sort(waits)
	lw := LockWait{P50: percentile(waits, 0.50), P95: percentile(waits, 0.95), P99: percentile(waits, 0.99)}
	if len(waits) > 0 {
		lw.Max = waits[len(waits)-1]
	}
	for sku, s := range skus {
		if s.LockWaitMs > 0 {
			lw.HotSKUs = append(lw.HotSKUs, sku)
		}
	}
	slices.SortFunc(lw.HotSKUs, func(a, b string) int {
		if c := cmp.Compare(skus[b].LockWaitMs, skus[a].LockWaitMs); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	lw.HotSKUs = lw.HotSKUs[:min(5, len(lw.HotSKUs))]
	return lw
}

func percentile[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[int(float64(len(sorted)-1)*p)]
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
		k := s.SKUs[sku]
		if k.Available < 0 {
			s.Problems = append(s.Problems, fmt.Sprintf("%s: available %d is negative (oversold)", sku, k.Available))
		}
		if k.Available+k.Reserved != k.Initial {
			s.Problems = append(s.Problems, fmt.Sprintf("%s: available %d + reserved %d != initial %d", sku, k.Available, k.Reserved, k.Initial))
		}
		if got := k.Reserved - k.reservedBefore; got != k.OrdersReserved {
			s.Problems = append(s.Problems, fmt.Sprintf("%s: reserved grew by %d but outcomes reserved %d", sku, got, k.OrdersReserved))
		}
	}
	s.Consistent = len(s.Problems) == 0
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
	if len(s.LockWait.HotSKUs) > 0 {
		fmt.Fprintf(w, "most lock wait:")
		for _, sku := range s.LockWait.HotSKUs {
			fmt.Fprintf(w, " %s (%.0f ms)", sku, s.SKUs[sku].LockWaitMs)
		}
		fmt.Fprintln(w)
	}
	names := s.skuNames()
	const maxRows = 20
	fmt.Fprintf(w, "%-16s %10s %10s %10s %12s %10s\n", "sku", "initial", "available", "reserved", "run reserved", "rejected")
	for i, n := range names {
		if i == maxRows {
			fmt.Fprintf(w, "... %d more SKUs\n", len(names)-maxRows)
			break
		}
		k := s.SKUs[n]
		fmt.Fprintf(w, "%-16s %10d %10d %10d %12d %10d\n", n, k.Initial, k.Available, k.Reserved, k.OrdersReserved, k.OrdersRejected)
	}
	if s.Consistent {
		fmt.Fprintln(w, "consistency check: PASS")
		return
	}
	fmt.Fprintf(w, "consistency check: FAIL\n  %s\n", strings.Join(s.Problems, "\n  "))
}
