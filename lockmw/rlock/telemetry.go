package rlock

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTelemetryPrefix is the default Config.TelemetryPrefix.
const DefaultTelemetryPrefix = "rlock"

// scope is the instrumentation scope of the tracer and the meter: the module path.
const scope = "github.com/stockflow/stockflow/lockmw/rlock"

// attrKeys are the keys of the span and metric attributes, under Config.TelemetryPrefix. The key is the one
// given to Acquire ("SKU-1"), on spans and events alike.
type attrKeys struct {
	key, mode, wait, attempts, reentry attribute.Key
	handOff                            attribute.Key // passed on by the previous holder in the process
	token                              attribute.Key
	result                             attribute.Key // acquired | not_obtained | error
}

func newAttrKeys(prefix string) attrKeys {
	k := func(name string) attribute.Key { return attribute.Key(prefix + "." + name) }
	return attrKeys{key: k("key"), mode: k("mode"), wait: k("wait.seconds"), attempts: k("attempts"),
		reentry: k("reentry"), handOff: k("handoff"), token: k("fencing_token"), result: k("result")}
}

// waitBuckets are the bucket bounds of the wait and hold histograms, in seconds.
var waitBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// telemetry is a locker's tracer and instruments, from Config's providers.
type telemetry struct {
	tracer     trace.Tracer
	wait, hold metric.Float64Histogram
	lost       metric.Int64Counter
	keys       attrKeys
	attrs      metricAttrs
}

func newTelemetry(mode string, cfg Config) (telemetry, error) {
	meter, prefix := cfg.MeterProvider.Meter(scope), cfg.TelemetryPrefix
	keys := newAttrKeys(prefix)
	t := telemetry{tracer: cfg.TracerProvider.Tracer(scope), keys: keys, attrs: newMetricAttrs(keys, mode)}
	var errs [3]error
	t.wait, errs[0] = meter.Float64Histogram(prefix+".wait", metric.WithUnit("s"),
		metric.WithDescription("Time from asking for a lock until holding it (or giving up)."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	t.hold, errs[1] = meter.Float64Histogram(prefix+".hold", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from acquisition to release."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	t.lost, errs[2] = meter.Int64Counter(prefix+".lost",
		metric.WithDescription("Leases lost: the watchdog found the lock gone or could not renew it in time."))
	return t, join(errs[:]...)
}

// metricAttrs are the attribute sets of one lock mode, built once, and the option lists of the histograms'
// records: building either per measurement costs allocations on every acquisition and release.
type metricAttrs struct {
	mode                            metric.MeasurementOption
	hold                            []metric.RecordOption // mode
	acquired, handOff, notObt, fail []metric.RecordOption
}

func newMetricAttrs(k attrKeys, mode string) metricAttrs {
	with := func(result string, handOff bool) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(k.mode.String(mode),
			k.result.String(result), k.handOff.Bool(handOff)))}
	}
	modeOnly := metric.WithAttributeSet(attribute.NewSet(k.mode.String(mode)))
	return metricAttrs{
		mode: modeOnly, hold: []metric.RecordOption{modeOnly},
		acquired: with("acquired", false), handOff: with("acquired", true),
		notObt: with("not_obtained", false), fail: with("error", false),
	}
}

// startAcquire starts the span of one acquisition.
func (e *engine) startAcquire(ctx context.Context, key string) (context.Context, trace.Span) {
	ctx, span := e.tel.tracer.Start(ctx, "lock acquire")
	if span.IsRecording() {
		span.SetAttributes(e.tel.keys.key.String(key), e.tel.keys.mode.String(e.mode))
	}
	return ctx, span
}

// endAcquire records the outcome of the acquisition on its span and in the wait histogram: the span's wait
// attribute and the histogram get the same value.
func (a *acquisition) endAcquire(l *lease, err error) {
	wait := time.Since(a.start)
	result, attrs := "acquired", a.e.tel.attrs.acquired
	switch {
	case err == nil && l.stats.HandOff:
		wait, attrs = l.stats.Waited, a.e.tel.attrs.handOff
	case err == nil:
		wait = l.stats.Waited
	case isNotObtained(err):
		result, attrs = "not_obtained", a.e.tel.attrs.notObt
	default:
		result, attrs = "error", a.e.tel.attrs.fail
	}
	if k := a.e.tel.keys; a.span.IsRecording() {
		a.span.SetAttributes(k.wait.Float64(wait.Seconds()), k.result.String(result))
		if err == nil {
			a.span.SetAttributes(k.attempts.Int(l.stats.Attempts), k.reentry.Bool(l.stats.Reentry),
				k.handOff.Bool(l.stats.HandOff), k.token.Int64(l.h.token))
		} else {
			a.span.RecordError(err)
			a.span.SetStatus(codes.Error, result)
		}
	}
	a.span.End()
	a.e.tel.wait.Record(a.spanCtx, wait.Seconds(), attrs...)
}

// renewalFailed reports a renewal whose outcome is unknown: in the log and on the holder's span.
func (e *engine) renewalFailed(h *hold, err error) {
	e.cfg.Logger.Warn("rlock: renewal failed", "key", h.key, "owner", h.redisOwner, "err", err)
	h.span.RecordError(fmt.Errorf("lock renewal failed: %w", err), trace.WithAttributes(e.tel.keys.key.String(h.key)))
}

// lockLost reports a lost hold: in the log, on the holder's span and in the lost-lease counter.
// The key's next waiter here tries again: the lost hold will hand nothing on.
func (e *engine) lockLost(h *hold, reason error) {
	e.queue.notify(h.names.channel)
	e.cfg.Logger.Error("rlock: lock lost", "key", h.key, "owner", h.redisOwner, "reason", reason)
	h.span.RecordError(join(ErrLockLost, reason), trace.WithAttributes(e.tel.keys.key.String(h.key)))
	e.tel.lost.Add(context.Background(), 1, e.tel.attrs.mode)
}
