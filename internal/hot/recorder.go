package hot

import (
	"cmp"
	"context"
	_ "embed"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/lockmw"
)

// Bounds and times of the hot SKUs.
const (
	Interval     = time.Second      // how often a worker publishes: at most one script call per Interval
	Window       = 10 * time.Second // the span of one window of keys
	Retention    = 10 * time.Minute // how long a window's keys live after its last write
	MaxTracked   = 10000            // SKUs a worker tracks per Interval; the waits of more are dropped
	MaxPublished = 200              // SKUs of most total wait a worker publishes per Interval
	MaxPerWindow = 1000             // SKUs a window keeps, those of most total wait
)

var (
	//go:embed publish.lua
	publishLua    string
	publishScript = redis.NewScript(publishLua)
)

// Key is the sorted set of the window that starts at start; StatsKey its hash.
func Key(start time.Time) string { return "hot:{" + strconv.FormatInt(start.Unix(), 10) + "}" }

// StatsKey is the hash of the window that starts at start (Key's, with its hash tag).
func StatsKey(start time.Time) string { return Key(start) + ":stats" }

// WindowOf is the start of the window t falls in.
func WindowOf(t time.Time) time.Time { return t.Truncate(Window) }

// Recorder is one worker's view of the lock waits by SKU (a lockmw.WaitRecorder), which Run publishes.
type Recorder struct {
	rdb    redis.Scripter
	logger *slog.Logger

	mu      sync.Mutex
	skus    map[string]*waits // since the last publication
	dropped int               // waits of SKUs past MaxTracked, since the last publication
	failing bool              // the last publication failed (logged once until one succeeds)
	warned  bool              // waits were dropped (logged the first time only)
}

// waits are one SKU's waits since the last publication.
type waits struct {
	orders       int64
	total, worst time.Duration
	worstTrace   trace.TraceID // zero: the worst wait's trace was not sampled
	lastTrace    trace.TraceID // the last sampled trace
}

// NewRecorder returns a recorder that publishes to rdb (REDIS_URL's Redis), logging to logger.
func NewRecorder(rdb redis.Scripter, logger *slog.Logger) *Recorder {
	return &Recorder{rdb: rdb, logger: logger, skus: map[string]*waits{}}
}

// RecordWait notes w for each of its keys, with the trace of ctx when it is sampled: the lock middleware
// calls it for every decided order (lockmw.Middleware.Waits).
func (r *Recorder) RecordWait(ctx context.Context, w lockmw.Wait) {
	waited := w.Until.Sub(w.From)
	var id trace.TraceID
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		id = sc.TraceID()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sku := range w.Keys {
		s := r.skus[sku]
		if s == nil {
			if len(r.skus) >= MaxTracked {
				r.dropped++
				continue
			}
			s = &waits{}
			r.skus[sku] = s
		}
		s.orders++
		s.total += waited
		if waited >= s.worst {
			s.worst, s.worstTrace = waited, id
		}
		if id.IsValid() {
			s.lastTrace = id
		}
	}
}

// Run publishes the waits noted every Interval until ctx is done. A nil Recorder does nothing (a worker
// without the lock middleware). The waits of a publication that failed are lost: a later second tells.
func (r *Recorder) Run(ctx context.Context) {
	if r == nil {
		return
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			r.log(r.Publish(ctx, now))
		}
	}
}

// Publish adds the waits noted since the last publication to the window of now, and forgets them.
func (r *Recorder) Publish(ctx context.Context, now time.Time) error {
	r.mu.Lock()
	skus, dropped := r.skus, r.dropped
	if len(skus) == 0 {
		r.mu.Unlock()
		return nil
	}
	r.skus, r.dropped = make(map[string]*waits, len(skus)), 0
	r.mu.Unlock()
	if dropped > 0 && !r.warned {
		r.warned = true
		r.logger.Warn("hot SKUs: more SKUs waited in one second than are tracked; the waits of the others are left out (logged once)",
			"tracked", MaxTracked, "waits_dropped", dropped)
	}
	start := WindowOf(now)
	args := []any{(Retention + Window).Milliseconds(), MaxPerWindow}
	for _, sku := range mostWaited(skus) {
		s := skus[sku]
		args = append(args, sku, s.orders, ms(s.total), ms(s.worst), traceHex(s.worstTrace), traceHex(s.lastTrace))
	}
	return publishScript.Run(ctx, r.rdb, []string{Key(start), StatsKey(start)}, args...).Err()
}

// mostWaited returns the SKUs of skus by total wait, most first, at most MaxPublished.
func mostWaited(skus map[string]*waits) []string {
	names := make([]string, 0, len(skus))
	for sku := range skus {
		names = append(names, sku)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(skus[b].total, skus[a].total) })
	return names[:min(len(names), MaxPublished)]
}

// log reports the first failed publication after a successful one, and the first success after that.
func (r *Recorder) log(err error) {
	switch {
	case err != nil && !r.failing:
		r.logger.Warn("hot SKUs: could not publish the lock waits (stockctl hot misses them)", "err", err)
	case err == nil && r.failing:
		r.logger.Info("hot SKUs: publishing the lock waits again")
	}
	r.failing = err != nil
}

// ms is d in milliseconds (to the nanosecond: an elided or batched wait may last less than a microsecond).
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
}

func traceHex(id trace.TraceID) string {
	if !id.IsValid() {
		return ""
	}
	return id.String()
}
