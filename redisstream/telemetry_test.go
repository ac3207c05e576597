package redisstream_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// recordSpans sends the spans of the test to a recorder, with the W3C propagator.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	spans := tracetest.NewSpanRecorder()
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
	return spans
}

// An order published through the Publisher into a real Redis, read back and processed: the send span and
// the process span are named and attributed as the messaging conventions say, and the process span is
// the send span's child and links to it.
func TestMessagingSpansFollowTheConventions(t *testing.T) {
	spans := recordSpans(t)
	rdb := redistest.Start(t).Client()
	host, port, _ := net.SplitHostPort(rdb.Options().Addr)
	p, _ := strconv.Atoi(port)
	server := []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(p)}
	if got := redisstream.ServerAttributes(rdb); !slices.Equal(got, server) {
		t.Fatalf("ServerAttributes %v, want %v", got, server)
	}

	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wpub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	msg := readBack(t, rdb, "orders")
	consumer := redisstream.Consumer{Stream: "orders", Group: "inventory", Name: "w-0", Server: server}
	_, span := consumer.StartProcess(context.Background(), msg)
	span.End()

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want send and process", len(ended))
	}
	send, process := ended[0], ended[1]
	checkSpan(t, send, "send orders", trace.SpanKindProducer, append([]attribute.KeyValue{
		semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName("orders")}, server...))
	checkSpan(t, process, "process orders", trace.SpanKindConsumer, append([]attribute.KeyValue{
		semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName("orders"),
		semconv.MessagingConsumerGroupName("inventory"), semconv.MessagingClientID("w-0"),
		semconv.MessagingMessageID(redisstream.EntryID(msg))}, server...))
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Errorf("process span's parent %v, want the send span %v in its trace", process.Parent(), send.SpanContext())
	}
	if l := process.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("process span links %v, want one to the send span", l)
	}
}

// With the no-op tracer provider (nothing exports spans), the producer's trace context still reaches the
// outcome event: the process span is the producer's span context, which the outcome's send puts in its
// metadata.
func TestTheNoopTracerPassesTheProducersTraceContextOn(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	msg := redisstream.Entry{ID: "1-1", Values: map[string]any{"payload": `{}`}}.Message()
	msg.Metadata.Set("traceparent", traceparent)
	ctx, span := redisstream.Consumer{Stream: "orders", Group: "g", Name: "c"}.StartProcess(context.Background(), msg)
	if sc := span.SpanContext(); !sc.IsRemote() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		!trace.SpanContextFromContext(ctx).Equal(sc) {
		t.Fatalf("process span %v (context %v), want the producer's", sc, trace.SpanContextFromContext(ctx))
	}
	out := message.NewMessage("o", []byte(`{}`))
	out.SetContext(ctx)
	rdb := redistest.Start(t).Client()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("results", out); err != nil {
		t.Fatal(err)
	}
	if got := out.Metadata.Get("traceparent"); got != traceparent {
		t.Fatalf("outcome traceparent %q, want the producer's %q", got, traceparent)
	}
}

// readBack reads the first entry of the stream back as the worker's subscribers do (Entry.Message).
func readBack(t *testing.T, rdb *redis.Client, name string) *message.Message {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), name, "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("stream %s: %v, %v; want one entry", name, entries, err)
	}
	return redisstream.Entry{ID: entries[0].ID, Values: entries[0].Values}.Message()
}

// A message without trace context starts a trace of its own, linked to nothing.
func TestProcessSpanOfAPlainEntryIsARoot(t *testing.T) {
	spans := recordSpans(t)
	msg := redisstream.Entry{ID: "1-1", Values: map[string]any{"payload": `{}`}}.Message()
	_, span := redisstream.Consumer{Stream: "orders", Group: "g", Name: "c"}.StartProcess(context.Background(), msg)
	span.End()
	sp := spans.Ended()[0]
	if sp.Parent().IsValid() || len(sp.Links()) != 0 {
		t.Fatalf("parent %v, links %v: want a root span without links", sp.Parent(), sp.Links())
	}
}

// A failed publish marks its span with error.type and status Error.
func TestFailedSendRecordsItsErrorType(t *testing.T) {
	spans := recordSpans(t)
	rdb := redistest.Start(t).Client()
	closed := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	closed.Close()
	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: closed}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	perr := wpub.Publish("order-results", message.NewMessage("1", nil))
	if perr == nil {
		t.Fatal("publishing with a closed client succeeded")
	}
	sp := spans.Ended()[0]
	et, ok := attr(sp, semconv.ErrorTypeKey)
	if sp.Name() != "send order-results" || sp.Status().Code != codes.Error || !ok || et.AsString() == "" {
		t.Fatalf("span %q status %v error.type %q, want send order-results failed with an error.type", sp.Name(), sp.Status(), et.AsString())
	}
}

// A Publish after Close fails its messages' send spans with ErrClosed.
func TestAPublishAfterCloseRecordsItsSpansFailed(t *testing.T) {
	spans := recordSpans(t)
	rdb := redistest.Start(t).Client()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub.Close()
	if err := pub.Publish("orders", message.NewMessage("1", nil)); !errors.Is(err, redisstream.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].Name() != "send orders" || ended[0].Status().Code != codes.Error {
		t.Fatalf("spans %v, want send orders failed", ended)
	}
}

func TestServerAttributesOfOtherClients(t *testing.T) {
	unix := redis.NewClient(&redis.Options{Network: "unix", Addr: "/run/redis.sock"})
	defer unix.Close()
	if got := redisstream.ServerAttributes(unix); !slices.Equal(got, []attribute.KeyValue{semconv.ServerAddress("/run/redis.sock")}) {
		t.Errorf("unix socket client: %v", got)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:1", "b:2"}})
	defer cluster.Close()
	if got := redisstream.ServerAttributes(cluster); got != nil {
		t.Errorf("cluster client: %v, want none", got)
	}
	// A client wrapping another (the producer's, which waits for replicas) names the server it wraps.
	if got := redisstream.ServerAttributes(wrapped{unix}); !slices.Equal(got, []attribute.KeyValue{semconv.ServerAddress("/run/redis.sock")}) {
		t.Errorf("wrapped client: %v", got)
	}
}

type wrapped struct{ redis.UniversalClient }

func (w wrapped) Unwrap() redis.UniversalClient { return w.UniversalClient }

// checkSpan fails unless the span has the name, kind and exactly the attributes given.
func checkSpan(t *testing.T, sp sdktrace.ReadOnlySpan, name string, kind trace.SpanKind, want []attribute.KeyValue) {
	t.Helper()
	if sp.Name() != name || sp.SpanKind() != kind {
		t.Errorf("span %q kind %v, want %q kind %v", sp.Name(), sp.SpanKind(), name, kind)
	}
	got, wantSet := attribute.NewSet(sp.Attributes()...), attribute.NewSet(slices.Clone(want)...)
	if !got.Equals(&wantSet) {
		t.Errorf("span %q attributes\n %v\nwant\n %v", name, got.ToSlice(), wantSet.ToSlice())
	}
}

func attr(sp sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
