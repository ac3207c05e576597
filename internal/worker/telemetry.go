package worker

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
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
		metric.WithDescription("Entries sent to the poison stream, by poison.reason."))
	retried, _ = meter.Int64Counter("stockflow.messages.retried",
		metric.WithDescription("Failed attempts handed back for a retry, by failure (transient, permanent)."))
	groupsRecreated, _ = meter.Int64Counter("stockflow.group.recreated",
		metric.WithDescription("Times the consumer group was found missing and created again."))
	pendingGauge, _ = meter.Int64ObservableGauge("stockflow.messages.pending",
		metric.WithDescription("Entries delivered to the consumer group and not acked yet."))
	lagGauge, _ = meter.Int64ObservableGauge("stockflow.consumer.lag",
		metric.WithDescription("Entries of the orders stream not yet delivered to the consumer group."))
	oldestPendingAge, _ = meter.Float64ObservableGauge("stockflow.messages.oldest_pending_age",
		metric.WithUnit("s"),
		metric.WithDescription("Age (since it was published) of the oldest entry still pending in the group; 0 when none is."))
)

// Attributes of the counters above.
var (
	reasonBadInput   = reasonAttr("bad_input")
	reasonPanic      = reasonAttr("panic")
	reasonFailed     = reasonAttr("failed")
	reasonAttempts   = reasonAttr("attempts")
	reasonOversized  = reasonAttr("oversized")
	failureTransient = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "transient")))
	failurePermanent = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "permanent")))
)

func reasonAttr(r string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String("poison.reason", r)))
}

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
		s.busy.Store(time.Now().UnixNano())
		defer func() {
			s.busy.Store(0)
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
