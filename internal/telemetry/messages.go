// Package telemetry carries trace context through stream messages and traces publishes, on the
// OpenTelemetry API alone (no SDK, no exporters: see internal/otelsetup for those).
package telemetry

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

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
