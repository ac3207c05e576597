package inventory

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

const scope = "github.com/stockflow/stockflow/inventory"

// Span and metric attributes.
const (
	attrSKU      = attribute.Key("stock.sku")
	attrQuantity = attribute.Key("stock.quantity")
	attrFence    = attribute.Key("stock.fence")
	attrStatus   = attribute.Key("stock.outcome")
	attrReason   = attribute.Key("stock.reason")
	attrReplayed = attribute.Key("stock.replayed")
)

// orders counts decided orders by outcome; no per-SKU attribute, which would grow without bound.
var orders, _ = otel.Meter(scope).Int64Counter("stockflow.orders",
	metric.WithDescription("Orders decided by the stock script, by outcome (replays included, marked replayed)."))

// traceReserve runs reserve inside a "stock reserve" span and counts its outcome.
func traceReserve(ctx context.Context, o Order, fence int64, reserve func(context.Context) (Outcome, error)) (Outcome, error) {
	ctx, span := otel.Tracer(scope).Start(ctx, "stock reserve", trace.WithAttributes(
		attrSKU.String(o.SKU), attrQuantity.Int64(o.Quantity), attrFence.Int64(fence)))
	defer span.End()
	out, err := reserve(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "reserve failed")
		return out, err
	}
	attrs := []attribute.KeyValue{attrStatus.String(string(out.Status)), attrReason.String(string(out.Reason)),
		attrReplayed.Bool(out.Replayed)}
	span.SetAttributes(attrs...)
	orders.Add(ctx, 1, metric.WithAttributes(attrs...))
	return out, nil
}
