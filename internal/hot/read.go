package hot

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SKU is what the workers published about one SKU over the windows read: its orders, their total and worst
// wait for its lock (milliseconds), the worst wait's trace and the last trace ("" when not sampled).
type SKU struct {
	SKU          string  `json:"sku"`
	Orders       int64   `json:"orders"`
	TotalWaitMS  float64 `json:"total_wait_ms"`
	WorstWaitMS  float64 `json:"worst_wait_ms"`
	WorstTraceID string  `json:"worst_trace_id"`
	LastTraceID  string  `json:"last_trace_id"`
}

// Read returns the SKUs of the windows that overlap the span since before now, most total wait first.
func Read(ctx context.Context, rdb redis.Cmdable, now time.Time, since time.Duration) ([]SKU, error) {
	type window struct {
		totals *redis.ZSliceCmd
		stats  *redis.MapStringStringCmd
	}
	var windows []window
	pipe := rdb.Pipeline()
	for start := WindowOf(now.Add(-since)); !start.After(now); start = start.Add(Window) {
		windows = append(windows, window{pipe.ZRangeWithScores(ctx, Key(start), 0, -1), pipe.HGetAll(ctx, StatsKey(start))})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	bySKU := map[string]*SKU{}
	for _, w := range windows { // oldest first: the last trace of a later window wins
		for _, z := range w.totals.Val() {
			name, _ := z.Member.(string)
			s := bySKU[name]
			if s == nil {
				s = &SKU{SKU: name}
				bySKU[name] = s
			}
			s.add(z.Score, w.stats.Val())
		}
	}
	out := make([]SKU, 0, len(bySKU))
	for _, s := range bySKU {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SKU) int {
		return cmp.Or(cmp.Compare(b.TotalWaitMS, a.TotalWaitMS), strings.Compare(a.SKU, b.SKU))
	})
	return out, nil
}

// add adds one window's figures of s: its total wait and its fields of the window's hash.
func (s *SKU) add(totalMS float64, stats map[string]string) {
	field := func(name string) string { return stats[s.SKU+":"+name] }
	orders, _ := strconv.ParseInt(field("orders"), 10, 64)
	worst, _ := strconv.ParseFloat(field("worst_ms"), 64)
	s.Orders += orders
	s.TotalWaitMS = math.Round((s.TotalWaitMS+totalMS)*1e6) / 1e6 // to the nanosecond, without float noise
	if worst >= s.WorstWaitMS {
		s.WorstWaitMS, s.WorstTraceID = worst, field("worst_trace")
	}
	if last := field("last_trace"); last != "" {
		s.LastTraceID = last
	}
}
