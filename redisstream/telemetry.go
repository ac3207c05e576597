package redisstream

// Traces and metrics of the streams, on the OpenTelemetry API alone (no SDK, no exporters: see
// internal/otelsetup for those). The spans follow the OpenTelemetry messaging conventions (semconv
// v1.43.0): a producer span "send <stream>" per published message, a consumer span "process <stream>" per
// handled one, named "{messaging.operation.name} {messaging.destination.name}".

import (
	"cmp"
	"context"
	"net"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var (
	meter = otel.Meter("github.com/stockflow/stockflow/redisstream")
	// Poisoned counts the entries sent to the poison stream, by poison.reason (PoisonReason).
	Poisoned, _ = meter.Int64Counter("stockflow.messages.poisoned",
		metric.WithDescription("Entries sent to the poison stream, by poison.reason."))
	// deletedEntries counts the entries found deleted from a stream while pending: never decided (a producer's
	// XADD MAXLEN or MINID, an XDEL or XTRIM by hand).
	deletedEntries, _ = meter.Int64Counter("stockflow.messages.deleted",
		metric.WithDescription("Entries deleted from the orders stream while pending, before their orders were decided."))
	// lostReplies counts the reads and claims whose reply was lost after Redis ran them (fetch.lua, by
	// op): their entries were handed over by the call made again, without another delivery.
	lostReplies, _ = meter.Int64Counter("stockflow.stream.lost_replies",
		metric.WithDescription("Reads and claims of the orders whose reply was lost after Redis ran them, by op; their entries were handed over again, without another delivery."))
	lostReplyOf = map[string]metric.AddOption{
		"read":  metric.WithAttributes(attribute.String("op", "read")),
		"claim": metric.WithAttributes(attribute.String("op", "claim")),
	}
	groupsRecreated, _ = meter.Int64Counter("stockflow.group.recreated",
		metric.WithDescription("Times the consumer group was found missing and created again."))
	reasonOversized = PoisonReason("oversized")
)

// PoisonReason is the attribute of Poisoned for one kind of reason.
func PoisonReason(r string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("poison.reason", r)))
}

// tracer is the tracer of the stockflow binaries.
func tracer() trace.Tracer {
	return otel.Tracer("github.com/stockflow/stockflow", tracerOptions...)
}

// startSpan starts a span with tracer. With the no-op tracer (nothing exports spans: otelsetup) it returns
// ctx and the non-recording span ctx holds (the producer's trace context, say), which is what the no-op
// tracer returns, without the context it would make to hold that same span again.
func startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t := tracer()
	if _, ok := t.(noop.Tracer); ok {
		if span := trace.SpanFromContext(ctx); !span.IsRecording() {
			return ctx, span
		}
	}
	return t.Start(ctx, name, opts...)
}

// tracerOptions are tracer's, made once: a slice made for each call would be allocated.
var tracerOptions = []trace.TracerOption{trace.WithSchemaURL(semconv.SchemaURL)}

// messagingSystem is the messaging.system of the streams. The conventions name no value for Redis Streams; "redis"
// is what OpenTelemetry's Redis instrumentations use for the database.
var messagingSystem = semconv.MessagingSystemKey.String("redis")

// Operations of the messaging spans (messaging.operation.name), the first word of their names.
const (
	operationSend    = "send"
	operationProcess = "process"
)

// spanName is the name of a messaging span: "{operation} {destination}", such as "process orders".
func spanName(operation, destination string) string { return operation + " " + destination }

// ServerAttributes are server.address and server.port of the Redis a client talks to, for the messaging
// spans; none for a client of several servers (a cluster). A client that wraps another (an Unwrap method
// returning it) is the one it wraps.
func ServerAttributes(rdb redis.UniversalClient) []attribute.KeyValue {
	for {
		w, ok := rdb.(interface{ Unwrap() redis.UniversalClient })
		if !ok {
			break
		}
		rdb = w.Unwrap()
	}
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil
	}
	addr := c.Options().Addr
	host, port, err := net.SplitHostPort(addr)
	if err != nil { // a Unix socket's path
		return []attribute.KeyValue{semconv.ServerAddress(addr)}
	}
	p, _ := strconv.Atoi(port)
	return []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(p)}
}

// inject writes the trace context of ctx into the message metadata (W3C traceparent).
func inject(ctx context.Context, msg *message.Message) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(msg.Metadata))
}

// extract returns ctx with the trace context carried by the message metadata.
func extract(ctx context.Context, msg *message.Message) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(msg.Metadata))
}

// Fail records err on span the way the conventions ask: error.type, the error as an event, status Error.
func Fail(span trace.Span, err error) {
	span.SetAttributes(semconv.ErrorType(err))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Consumer is one consumer of a group, as the spans of the messages it processes name it.
type Consumer struct {
	Stream, Group, Name string
	// Server is the address of the Redis it reads from (ServerAttributes); nil: unknown.
	Server []attribute.KeyValue
}

// StartProcess starts the consumer span of processing msg, "process <stream>", under ctx. The span that
// sent the message (its traceparent) is its parent, so one trace runs from publish to outcome, and its
// link, as the conventions ask of a process span.
func (c Consumer) StartProcess(ctx context.Context, msg *message.Message) (context.Context, trace.Span) {
	return c.Spans().Start(ctx, msg)
}

// Spans is what the consumer spans of c need that does not change by message, built once.
func (c Consumer) Spans() ProcessSpans {
	attrs := append([]attribute.KeyValue{messagingSystem, semconv.MessagingOperationName(operationProcess),
		semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(c.Stream),
		semconv.MessagingConsumerGroupName(c.Group), semconv.MessagingClientID(c.Name)}, c.Server...)
	return ProcessSpans{name: spanName(operationProcess, c.Stream),
		opts: []trace.SpanStartOption{trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindConsumer)}}
}

// ProcessSpans starts the consumer spans of one consumer (Consumer.Spans).
type ProcessSpans struct {
	name string
	opts []trace.SpanStartOption // the same for every message
}

// Start starts the consumer span of processing msg under ctx, as Consumer.StartProcess does. What differs
// by message (its id, the link) is added only to a span that records: with no tracing, a span costs
// nothing. The message id is the stream entry's (EntryID), which Redis assigned and an operator looks up
// with XRANGE; the send span, made before Redis assigned it, has the message's UUID.
func (p ProcessSpans) Start(ctx context.Context, msg *message.Message) (context.Context, trace.Span) {
	ctx = extract(ctx, msg)
	sent := trace.SpanContextFromContext(ctx)
	ctx, span := startSpan(ctx, p.name, p.opts...)
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingMessageID(cmp.Or(EntryID(msg), msg.UUID)))
		if sent.IsRemote() {
			span.AddLink(trace.Link{SpanContext: sent})
		}
	}
	return ctx, span
}
