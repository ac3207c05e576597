package rlock

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

	"github.com/stockflow/stockflow/internal/testing/redistest"
)

// Spans and metrics go to the providers of Config (not the global ones, which this test binary leaves as
// no-ops), under stockflow.lock.* attributes, with the key spelled as given everywhere; the wait is
// recorded under the acquisition's span, so its exemplar points at that span.
func TestTelemetryGoesToTheConfiguredProviders(t *testing.T) {
	s := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newLocker(t, s, Config{Lease: 300 * time.Millisecond, TracerProvider: tp, MeterProvider: mp})

	ctx, parent := tp.Tracer("test").Start(context.Background(), "process orders")
	lease := mustAcquire(t, l, ctx, "SKU-1")
	s.Client().Del(ctx, "lock:{SKU-1}") // lost: an event on the holder's span
	<-lease.Context().Done()
	_ = lease.Release(ctx)
	parent.End()

	acquire := endedSpan(t, spans, "lock acquire")
	wantAttrs(t, "lock acquire span", acquire.Attributes(), map[string]any{"stockflow.lock.key": "SKU-1",
		"stockflow.lock.mode": "reentrant", "stockflow.lock.result": "acquired", "stockflow.lock.attempts": int64(1),
		"stockflow.lock.reentry": false, "stockflow.lock.fencing_token": lease.Token()})
	for _, kv := range acquire.Attributes() {
		if !strings.HasPrefix(string(kv.Key), "stockflow.lock.") {
			t.Errorf("lock acquire span attribute %s outside stockflow.lock.*", kv.Key)
		}
	}
	events := endedSpan(t, spans, "process orders").Events()
	if len(events) != 1 {
		t.Fatalf("holder's span events %v, want the loss", events)
	}
	wantAttrs(t, "loss event", events[0].Attributes, map[string]any{"stockflow.lock.key": "SKU-1"})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wait := histogram(t, rm, "rlock.wait")
	wantAttrs(t, "wait histogram", wait.Attributes.ToSlice(), map[string]any{"stockflow.lock.mode": "reentrant",
		"stockflow.lock.result": "acquired"})
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
// stockflow.lock.handoff=true.
func TestHandOffIsRecordedAsAnAcquisition(t *testing.T) {
	s := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newLocker(t, s, Config{TracerProvider: tp, MeterProvider: mp})
	holder := mustAcquire(t, l, context.Background(), "SKU-1")
	got, release := queueBehind(t, l, "SKU-1", 1)
	release(holder)
	release(next(t, got))

	var handOffs []bool
	for _, sp := range spans.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "stockflow.lock.handoff" {
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
					v, _ := dp.Attributes.Value("stockflow.lock.handoff")
					points[v.AsBool()] += dp.Count
				}
			}
		}
	}
	if points[false] != 1 || points[true] != 1 {
		t.Fatalf("wait histogram counts by handoff %v, want one each", points)
	}
}
