package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

//go:embed trim.lua
var trimLua string
var trimScript = redis.NewScript(trimLua)

// backlog is the consumer group's state as the last housekeeping round saw it.
type backlog struct {
	found   bool
	pending int64
	lag     int64     // entries not yet delivered to the group; -1 unknown
	oldest  time.Time // when the oldest pending entry was published; zero when none is pending
}

// housekeep trims the orders stream to STREAM_RETENTION and records the group's backlog, every
// min(STREAM_RETENTION/4, 10 s) until ctx ends. The owners of partition 0 among the live workers do it (2
// of them, redisstream.Subscriber.Owns; every worker until it knows of the others), so that it costs Redis the
// same however many workers there are; the others report no backlog (the dashboards and alerts take the
// max over the workers). Trimming is idempotent.
func (w *Worker) housekeep(ctx context.Context) {
	tick := time.NewTicker(min(w.cfg.StreamRetention/4, 10*time.Second))
	defer tick.Stop()
	for {
		w.housekeepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *Worker) housekeepOnce(ctx context.Context) {
	if w.sub != nil && !w.sub.Owns(w.parts[0].Orders) {
		w.backlog.Store(nil) // another worker's to report
		return
	}
	if err := w.trim(ctx); err != nil && ctx.Err() == nil {
		w.logger.Warn("housekeeping: trimming the orders stream failed", "err", err)
	}
}

// trim runs trim.lua on every partition: entries older than the retention go, unless a group still needs
// them. The backlog gauges then show the sum over the partitions.
func (w *Worker) trim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	retention := w.cfg.StreamRetention.Milliseconds()
	total := &backlog{}
	var errs []error
	for _, p := range w.parts {
		r, err := trimScript.Run(ctx, w.rdb, []string{p.Orders, DeliveredTimesKey(p.Orders)}, retention, w.cfg.ConsumerGroup).Slice()
		if err == nil && len(r) != 6 {
			err = fmt.Errorf("unexpected reply %v", r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Orders, err))
			continue
		}
		total.add(parseBacklog(r))
		if trimmed, _ := r[0].(int64); trimmed > 0 {
			w.logger.Debug("housekeeping: trimmed the orders stream", "stream", p.Orders, "entries", trimmed)
		}
		w.noteHolder(p.Orders, r[5])
	}
	if len(errs) < len(w.parts) {
		w.backlog.Store(total)
	}
	return errors.Join(errs...)
}

// DeliveredTimesKey is where trim.lua notes when the entries of stream up to an id had been delivered (in
// stream's slot): a sorted set of ids scored by Redis's time, unix ms, so that retention does not depend on
// ids a producer chose.
func DeliveredTimesKey(stream string) string { return stream + ":delivered-times" }

// add adds another partition's backlog to b.
func (b *backlog) add(o *backlog) {
	b.found = b.found || o.found
	b.pending += o.pending
	if b.lag >= 0 && o.lag >= 0 {
		b.lag += o.lag
	} else {
		b.lag = -1 // unknown in one partition: unknown
	}
	if !o.oldest.IsZero() && (b.oldest.IsZero() || o.oldest.Before(b.oldest)) {
		b.oldest = o.oldest
	}
}

// parseBacklog reads trim.lua's reply {trimmed, found, pending, lag, oldest pending id, holder}.
func parseBacklog(r []any) *backlog {
	found, _ := r[1].(int64)
	b := &backlog{found: found == 1}
	b.pending, _ = r[2].(int64)
	b.lag, _ = r[3].(int64)
	oldest, _ := r[4].(string)
	b.oldest = idTime(oldest)
	return b
}

// idTime is when the stream entry id was added (its milliseconds part); zero for "" or a malformed id.
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if id == "" || err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// noteHolder warns once each time another consumer group starts keeping entries of stream older than the
// retention: an abandoned group makes the stream grow without bound, and keeps entries past their outcome
// records.
func (w *Worker) noteHolder(stream string, reply any) {
	holder, _ := reply.(string)
	if holder == w.cfg.ConsumerGroup {
		holder = "" // our own backlog shows in the pending gauges
	}
	if w.holders == nil {
		w.holders = map[string]string{}
	}
	prev := w.holders[stream]
	w.holders[stream] = holder
	if holder != "" && holder != prev {
		w.logger.Warn("housekeeping: another consumer group keeps orders older than STREAM_RETENTION; delete it if nobody reads it",
			"stream", stream, "group", holder)
	}
}

// observeBacklog reports the last backlog on the gauges.
func (w *Worker) observeBacklog(_ context.Context, o metric.Observer) error {
	b := w.backlog.Load()
	if b == nil || !b.found {
		return nil
	}
	o.ObserveInt64(pendingGauge, b.pending)
	if b.lag >= 0 {
		o.ObserveInt64(lagGauge, b.lag)
	}
	o.ObserveFloat64(oldestPendingAge, b.oldestAge())
	return nil
}

// oldestAge is the age of the oldest pending entry in seconds, 0 when none is pending.
func (b *backlog) oldestAge() float64 {
	if b.oldest.IsZero() {
		return 0
	}
	return max(time.Since(b.oldest).Seconds(), 0) // 0 for an id in the future, as a producer may choose
}
