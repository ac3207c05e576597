package delivery

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The trace step wraps the handling of a message in the consumer span of the messaging conventions,
// "process orders", which the handler's calls run under, and which records a failure with its error.type.
func TestTraceStepStartsTheProcessSpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	e := newChainEnv(t)
	msg := e.deliver(t, 1)
	orig := msg.Context()

	failure := errors.New("handler failed")
	var inside trace.SpanContext
	_, err := e.c.trace(func(m *message.Message) ([]*message.Message, error) {
		inside = trace.SpanContextFromContext(m.Context())
		return nil, failure
	})(msg)
	if !errors.Is(err, failure) || msg.Context() != orig {
		t.Fatalf("trace step: %v, context restored %v; want the handler's error and the message's context back", err, msg.Context() == orig)
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want 1", len(ended))
	}
	sp := ended[0]
	if sp.Name() != "process orders" || sp.SpanKind() != trace.SpanKindConsumer || !sp.SpanContext().Equal(inside) {
		t.Fatalf("span %q kind %v; the handler ran under %v, the span is %v", sp.Name(), sp.SpanKind(), inside, sp.SpanContext())
	}
	host, port, _ := net.SplitHostPort(e.rdb.Options().Addr)
	p, _ := strconv.Atoi(port)
	want := attribute.NewSet(semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName("orders"),
		semconv.MessagingConsumerGroupName("g"), semconv.MessagingClientID("c1"), semconv.MessagingMessageID(msg.UUID),
		semconv.ServerAddress(host), semconv.ServerPort(p), semconv.ErrorType(failure))
	if got := attribute.NewSet(sp.Attributes()...); !got.Equals(&want) {
		t.Fatalf("process span attributes\n %v\nwant\n %v", got.ToSlice(), want.ToSlice())
	}
	if sp.Status().Code != codes.Error {
		t.Fatalf("process span status %v, want Error", sp.Status())
	}
}

// The messages in flight count up as a message's handling starts and down as it ends, even when the
// message's context ended meanwhile (a lost lease, the shutdown timeout). (OpenTelemetry's SDK once dropped
// a measurement under an ended context, which would leave the gauge up for good.)
func TestInFlightComesBackDownWhenTheMessageContextEnded(t *testing.T) {
	reader := meterReader()
	inFlightNow := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == "stockflow.messages.in_flight" {
					for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
						n += dp.Value
					}
				}
			}
		}
		return n
	}
	e := newChainEnv(t)
	msg := e.deliver(t, 1)
	ctx, cancel := context.WithCancel(msg.Context())
	msg.SetContext(ctx)
	var during int64
	_, _ = e.c.trace(func(*message.Message) ([]*message.Message, error) {
		during = inFlightNow()
		cancel()
		return nil, nil
	})(msg)
	if after := inFlightNow(); during != 1 || after != 0 {
		t.Fatalf("messages in flight: %d while handled, %d after; want 1, then 0", during, after)
	}
}

// meterReader reads the package's instruments. They are bound to the first meter provider set in the
// process, so the provider is set once (go test -count=2 runs a test twice in one process).
var meterReader = sync.OnceValue(func() *sdkmetric.ManualReader {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return reader
})
