package delivery

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/redisstream"
)

var (
	meter       = otel.Meter("github.com/stockflow/stockflow/internal/delivery")
	inFlight, _ = meter.Int64UpDownCounter("stockflow.messages.in_flight",
		metric.WithDescription("Order messages being handled."))
	retried, _ = meter.Int64Counter("stockflow.messages.retried",
		metric.WithDescription("Failed attempts handed back for a retry, by failure (transient, permanent)."))
)

// Attributes of the counters above.
var (
	reasonBadInput   = redisstream.PoisonReason("bad_input")
	reasonPanic      = redisstream.PoisonReason("panic")
	reasonFailed     = redisstream.PoisonReason("failed")
	reasonAttempts   = redisstream.PoisonReason("attempts")
	failureTransient = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "transient")))
	failurePermanent = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "permanent")))
)
