// The lock library's telemetry checked with the OpenTelemetry SDK. These tests live in the product's
// module, not in lockmw/rlock's: the SDK would otherwise be a requirement of the library's go.mod, and so of
// every module that imports the library.
package lockmw_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Spans and metrics go to the providers of rlock.Config (not the global ones, which this test binary leaves
// as no-ops), under rlock.* attributes, with the key spelled as given everywhere; the wait is
// recorded under the acquisition's span, so its exemplar points at that span.
func TestRlockTelemetryGoesToTheConfiguredProviders(t *testing.T) {
	s := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newRlocker(t, s, rlock.Config{Lease: 300 * time.Millisecond, TracerProvider: tp, MeterProvider: mp})

	ctx, parent := tp.Tracer("test").Start(context.Background(), "process orders")
	lease, err := l.Acquire(ctx, "SKU-1")
	if err != nil {
		t.Fatal(err)
	}
	s.Client().Del(ctx, rlock.LockKey("SKU-1")) // lost: an event on the holder's span
	<-lease.Context().Done()
	_ = lease.Release(ctx)
	parent.End()

	acquire := endedSpan(t, spans, "lock acquire")
	wantAttrs(t, "lock acquire span", acquire.Attributes(), map[string]any{"rlock.key": "SKU-1",
		"rlock.mode": "reentrant", "rlock.result": "acquired", "rlock.attempts": int64(1),
		"rlock.reentry": false, "rlock.fencing_token": lease.Token()})
	for _, kv := range acquire.Attributes() {
		if !strings.HasPrefix(string(kv.Key), "rlock.") {
			t.Errorf("lock acquire span attribute %s outside rlock.*", kv.Key)
		}
	}
	events := endedSpan(t, spans, "process orders").Events()
	if len(events) != 1 {
		t.Fatalf("holder's span events %v, want the loss", events)
	}
	wantAttrs(t, "loss event", events[0].Attributes, map[string]any{"rlock.key": "SKU-1"})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wait := histogram(t, rm, "rlock.wait")
	wantAttrs(t, "wait histogram", wait.Attributes.ToSlice(), map[string]any{"rlock.mode": "reentrant",
		"rlock.result": "acquired"})
	if id := acquire.SpanContext().SpanID(); len(wait.Exemplars) != 1 || string(wait.Exemplars[0].SpanID) != string(id[:]) {
		t.Errorf("wait exemplars %+v, want one of the acquisition's span %s", wait.Exemplars, id)
	}
	if hold := histogram(t, rm, "rlock.hold"); hold.Count != 1 {
		t.Errorf("hold histogram count %d, want 1", hold.Count)
	}
	if lost := sum(t, rm, "rlock.lost"); lost != 1 {
		t.Errorf("lost counter %d, want 1", lost)
	}
}

func endedSpan(t *testing.T, spans *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, sp := range spans.Ended() {
		if sp.Name() == name {
			return sp
		}
	}
	t.Fatalf("no %q span among %d", name, len(spans.Ended()))
	return nil
}

func wantAttrs(t *testing.T, what string, attrs []attribute.KeyValue, want map[string]any) {
	t.Helper()
	got := map[string]any{}
	for _, kv := range attrs {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v (all: %v)", what, k, got[k], v, got)
		}
	}
}

func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name && len(h.DataPoints) == 1 {
				return h.DataPoints[0]
			}
		}
	}
	t.Fatalf("no histogram %s with one data point", name)
	return metricdata.HistogramDataPoint[float64]{}
}

func sum(t *testing.T, rm metricdata.ResourceMetrics, name string) int64 {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name && len(s.DataPoints) == 1 {
				return s.DataPoints[0].Value
			}
		}
	}
	t.Fatalf("no counter %s with one data point", name)
	return 0
}

// A hand-off is an acquisition like any other on spans and in the wait histogram, marked
// rlock.handoff=true.
func TestRlockHandOffIsRecordedAsAnAcquisition(t *testing.T) {
	s := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newRlocker(t, s, rlock.Config{TracerProvider: tp, MeterProvider: mp})
	handOff(t, s, l, "SKU-1")

	var handOffs []bool
	for _, sp := range spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "rlock.handoff" {
				handOffs = append(handOffs, kv.Value.AsBool())
			}
		}
	}
	if len(handOffs) != 2 || handOffs[0] || !handOffs[1] {
		t.Fatalf("handoff attributes of the two acquisitions %v, want [false true]", handOffs)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[bool]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "rlock.wait" {
				for _, dp := range h.DataPoints {
					v, _ := dp.Attributes.Value("rlock.handoff")
					points[v.AsBool()] += dp.Count
				}
			}
		}
	}
	if points[false] != 1 || points[true] != 1 {
		t.Fatalf("wait histogram counts by handoff %v, want one each", points)
	}
}

// A TelemetryPrefix renames the metrics and the attributes.
func TestRlockTelemetryPrefixRenamesMetricsAndAttributes(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newRlocker(t, redistest.Start(t), rlock.Config{TracerProvider: tp, MeterProvider: mp, TelemetryPrefix: "app.lock"})
	lease, err := l.Acquire(context.Background(), "SKU-1")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(context.Background())
	wantAttrs(t, "lock acquire span", endedSpan(t, spans, "lock acquire").Attributes(),
		map[string]any{"app.lock.key": "SKU-1", "app.lock.mode": "reentrant", "app.lock.result": "acquired"})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wait := histogram(t, rm, "app.lock.wait")
	wantAttrs(t, "wait histogram", wait.Attributes.ToSlice(), map[string]any{"app.lock.mode": "reentrant"})
	if hold := histogram(t, rm, "app.lock.hold"); hold.Count != 1 {
		t.Errorf("hold histogram count %d, want 1", hold.Count)
	}
}

// newRlocker is a Reentrant on s with its own client, closed when the test ends.
func newRlocker(t *testing.T, s *redistest.Server, cfg rlock.Config) *rlock.Reentrant {
	t.Helper()
	l, err := rlock.NewReentrant(s.Client(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// handOff has l acquire key, queues a second acquisition behind it (its subscription to the unlock channel
// shows it waits), and releases both: the second is handed the lock without a Redis call.
func handOff(t *testing.T, s *redistest.Server, l *rlock.Reentrant, key string) {
	t.Helper()
	ctx := context.Background()
	holder, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan rlock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	rdb, channel := s.Client(), rlock.ChannelKey(key)
	for end := time.Now().Add(5 * time.Second); rdb.PubSubNumSub(ctx, channel).Val()[channel] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the second acquisition did not subscribe to the unlock channel within 5 s")
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if next := <-got; next != nil {
		if !rlock.StatsOf(next).HandOff {
			t.Fatal("the second acquisition was not handed the lock")
		}
		_ = next.Release(ctx)
	}
}
