package lockmw

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Span and metric attributes.
const (
	attrKey      = attribute.Key("lock.key")
	attrMode     = attribute.Key("lock.mode") // reentrant | redlock
	attrWait     = attribute.Key("lock.wait.seconds")
	attrAttempts = attribute.Key("lock.attempts")
	attrReentry  = attribute.Key("lock.reentry")
	attrToken    = attribute.Key("lock.fencing_token")
	attrResult   = attribute.Key("lock.result") // acquired | not_obtained | error
)

const scope = "github.com/stockflow/stockflow/lockmw"

// The instruments come from the global meter provider; they are no-ops until one is installed.
var (
	meter = otel.Meter(scope)
	// WaitBuckets are the bucket bounds of the lock wait histogram, in seconds.
	WaitBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	waitHist, _ = meter.Float64Histogram("stockflow.lock.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from asking for a lock until holding it (or giving up)."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	holdHist, _ = meter.Float64Histogram("stockflow.lock.hold", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from acquisition to release."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	lostCount, _ = meter.Int64Counter("stockflow.lock.lost",
		metric.WithDescription("Leases lost: the watchdog found the lock gone or could not renew it in time."))
)

func tracer() trace.Tracer { return otel.Tracer(scope) }

// metricAttrs are the attribute sets of one lock mode, built once: building them per measurement costs
// allocations on every acquisition.
type metricAttrs struct {
	mode                   metric.MeasurementOption
	acquired, notObt, fail metric.MeasurementOption
}

func newMetricAttrs(mode string) metricAttrs {
	with := func(result string) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(attrMode.String(mode), attrResult.String(result)))
	}
	return metricAttrs{
		mode:     metric.WithAttributeSet(attribute.NewSet(attrMode.String(mode))),
		acquired: with("acquired"), notObt: with("not_obtained"), fail: with("error"),
	}
}

// startAcquire starts the span of one acquisition.
func (e *engine) startAcquire(ctx context.Context, key string) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, "lock acquire")
	if span.IsRecording() {
		span.SetAttributes(attrKey.String(key), attrMode.String(e.mode))
	}
	return ctx, span
}

// endAcquire records the outcome of the acquisition on its span and in the wait histogram: the span's wait
// attribute and the histogram get the same value.
func (a *acquisition) endAcquire(l *lease, err error) {
	wait := time.Since(a.start)
	result, attrs := "acquired", a.e.attrs.acquired
	switch {
	case err == nil:
		wait = l.stats.Waited
	case isNotObtained(err):
		result, attrs = "not_obtained", a.e.attrs.notObt
	default:
		result, attrs = "error", a.e.attrs.fail
	}
	if a.span.IsRecording() {
		a.span.SetAttributes(attrWait.Float64(wait.Seconds()), attrResult.String(result))
		if err == nil {
			a.span.SetAttributes(attrAttempts.Int(l.stats.Attempts), attrReentry.Bool(l.stats.Reentry), attrToken.Int64(l.h.token))
		} else {
			a.span.RecordError(err)
			a.span.SetStatus(codes.Error, result)
		}
	}
	a.span.End()
	waitHist.Record(a.ctx, wait.Seconds(), attrs)
}

// renewalFailed reports a renewal whose outcome is unknown: in the log and on the holder's span.
func (e *engine) renewalFailed(h *hold, err error) {
	e.cfg.Logger.Warn("lockmw: renewal failed", "lock", h.names.lock, "owner", h.owner, "err", err)
	h.span.RecordError(fmt.Errorf("lock renewal failed: %w", err), trace.WithAttributes(attrKey.String(h.names.lock)))
}

// lockLost reports a lost hold: in the log, on the holder's span and in the lost-lease counter.
func (e *engine) lockLost(h *hold, reason error) {
	e.cfg.Logger.Error("lockmw: lock lost", "lock", h.names.lock, "owner", h.owner, "reason", reason)
	h.span.RecordError(fmt.Errorf("%w: %w", ErrLockLost, reason), trace.WithAttributes(attrKey.String(h.names.lock)))
	lostCount.Add(context.Background(), 1, e.attrs.mode)
}
