package stream

// Traces and metrics of the streams, on the OpenTelemetry API alone (no SDK, no exporters: see
// internal/otelsetup for those).

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

var (
	meter = otel.Meter("github.com/stockflow/stockflow/internal/stream")
	// Poisoned counts the entries sent to the poison stream, by poison.reason (PoisonReason).
	Poisoned, _ = meter.Int64Counter("stockflow.messages.poisoned",
		metric.WithDescription("Entries sent to the poison stream, by poison.reason."))
	groupsRecreated, _ = meter.Int64Counter("stockflow.group.recreated",
		metric.WithDescription("Times the consumer group was found missing and created again."))
	reasonOversized = PoisonReason("oversized")
)

// PoisonReason is the attribute of Poisoned for one kind of reason.
func PoisonReason(r string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("poison.reason", r)))
}

// Tracer is the tracer of the stockflow binaries.
func Tracer() trace.Tracer { return otel.Tracer("github.com/stockflow/stockflow") }

// Messaging attributes (OpenTelemetry semantic conventions for messaging).
const (
	MessagingSystem = attribute.Key("messaging.system")
	Destination     = attribute.Key("messaging.destination.name")
	Operation       = attribute.Key("messaging.operation.type")
	MessageID       = attribute.Key("messaging.message.id")
	ConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	ClientID        = attribute.Key("messaging.client.id")
)

// Inject writes the trace context of ctx into the message metadata (W3C traceparent).
func Inject(ctx context.Context, msg *message.Message) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(msg.Metadata))
}

// Extract returns ctx with the trace context carried by the message metadata.
func Extract(ctx context.Context, msg *message.Message) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(msg.Metadata))
}

// Publisher traces every publish with a producer span and passes the trace context on in the metadata.
type Publisher struct{ message.Publisher }

func (p Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		ctx, span := Tracer().Start(msg.Context(), topic+" publish", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(MessagingSystem.String("redis"), Destination.String(topic), Operation.String("send")))
		Inject(ctx, msg)
		err := p.Publisher.Publish(topic, msg)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if err != nil {
			return err
		}
	}
	return nil
}
