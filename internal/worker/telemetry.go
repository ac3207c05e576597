package worker

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/internal/telemetry"
)

var (
	meter       = otel.Meter("github.com/stockflow/stockflow/internal/worker")
	inFlight, _ = meter.Int64UpDownCounter("stockflow.messages.in_flight",
		metric.WithDescription("Order messages being handled."))
	poisoned, _ = meter.Int64Counter("stockflow.messages.poisoned",
		metric.WithDescription("Entries sent to the poison stream."))
)

// traceMiddleware continues the trace the message carries (W3C traceparent in its metadata, set by the
// producer) with a consumer span around the whole handling, and counts the messages in flight.
func (s stream) traceMiddleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		orig := msg.Context()
		ctx, span := telemetry.Tracer().Start(telemetry.Extract(orig, msg), s.name+" process",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(telemetry.MessagingSystem.String("redis"), telemetry.Destination.String(s.name),
				telemetry.Operation.String("process"), telemetry.MessageID.String(msg.UUID),
				telemetry.ConsumerGroup.String(s.group), telemetry.ClientID.String(s.consumer)))
		inFlight.Add(ctx, 1)
		defer func() {
			inFlight.Add(context.WithoutCancel(ctx), -1)
			span.End()
			msg.SetContext(orig)
		}()
		msg.SetContext(ctx)
		msgs, err := h(msg)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "handling failed")
		}
		return msgs, err
	}
}
