package inventory

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stockflow/stockflow/order"
)

const scope = "github.com/stockflow/stockflow/inventory"

// Attributes of the stock spans and of the orders counter, the same keys on both. The semantic conventions
// have none for stock, so they are ours, under stockflow.stock.
const (
	AttrSKU      = attribute.Key("stockflow.stock.sku")
	AttrQuantity = attribute.Key("stockflow.stock.quantity")
	AttrFence    = attribute.Key("stockflow.stock.fence") // the fencing token the write came with
	// AttrLockElided marks a batch that took its lock inside its script (ElideLock; the fence says -1).
	AttrLockElided = attribute.Key("stockflow.stock.lock_elided")
	AttrOutcome    = attribute.Key("stockflow.stock.outcome")    // reserved | rejected (Status)
	AttrReason     = attribute.Key("stockflow.stock.reason")     // why rejected (Reason), "" when reserved
	AttrReplayed   = attribute.Key("stockflow.stock.replayed")   // the outcome recorded the first time
	AttrBatchSize  = attribute.Key("stockflow.stock.batch_size") // how many orders a ReserveBatch decided
	AttrLines      = attribute.Key("stockflow.stock.lines")      // how many lines (SKUs) an order has
	AttrOrderID    = attribute.Key("stockflow.stock.order_id")   // on the spans of ReserveLines, Cancel, Fulfil
	// AttrReplicaAcks is how many replicas acknowledged the write (WithReplicaAcks), on the span only.
	AttrReplicaAcks = attribute.Key("stockflow.stock.replica_acks")
)

// The names of the spans of Reserve and ReserveBatch.
const (
	SpanReserve      = "stock reserve"
	SpanReserveBatch = "stock reserve batch"
)

// The names of the spans of ReserveLines, Cancel and Fulfil: "stock " and the operation.
const (
	SpanReserveLines = "stock reserve lines"
	SpanCancel       = "stock cancel"
	SpanFulfil       = "stock fulfil"
)

// traceOrder runs op inside a span named name and counts the order's outcome (once per order, whatever
// its number of lines).
func traceOrder(ctx context.Context, name, orderID string, op func(context.Context) (OrderOutcome, error)) (OrderOutcome, error) {
	ctx, span := otel.Tracer(scope).Start(ctx, name, trace.WithAttributes(AttrOrderID.String(orderID)))
	defer span.End()
	out, err := op(ctx)
	if err != nil {
		return out, failed(span, err)
	}
	attrs := []attribute.KeyValue{AttrOutcome.String(string(out.Status)), AttrReason.String(string(out.Reason)),
		AttrReplayed.Bool(out.Replayed)}
	orders.Add(ctx, 1, metric.WithAttributes(attrs...))
	span.SetAttributes(append(attrs, AttrLines.Int(len(out.Lines)), AttrSKU.String(out.SKU))...)
	return out, nil
}

// orders counts decided orders by outcome; no per-SKU attribute, which would grow without bound.
var orders, _ = otel.Meter(scope).Int64Counter("stockflow.orders",
	metric.WithDescription("Orders decided by the stock script, by outcome (replays included, marked replayed)."))

// traceReserve runs reserve inside a SpanReserve span and counts its outcome.
func traceReserve(ctx context.Context, o Order, fence int64, reserve func(context.Context) (Outcome, error)) (Outcome, error) {
	ctx, span := otel.Tracer(scope).Start(ctx, SpanReserve, trace.WithAttributes(
		AttrSKU.String(o.SKU), AttrQuantity.Int64(o.Quantity), AttrFence.Int64(fence)))
	defer span.End()
	out, err := reserve(ctx)
	if err != nil {
		return out, failed(span, err)
	}
	counted := countOrder(ctx, out)
	span.SetAttributes(counted.ToSlice()...)
	return out, nil
}

// startBatch starts the SpanReserveBatch span of a batch; endBatch ends it once the batch is decided.
func startBatch(ctx context.Context, batch []Order, fence int64) (context.Context, trace.Span) {
	ctx, span := startSpan(ctx, SpanReserveBatch)
	if span.IsRecording() { // with no tracing, nothing is built
		span.SetAttributes(AttrSKU.String(batch[0].SKU), AttrFence.Int64(fence), AttrBatchSize.Int(len(batch)),
			AttrLockElided.Bool(fence == ElideLock))
	}
	return ctx, span
}

// endBatch ends a batch's span (startBatch) and counts the outcome of each of its orders; the outcomes are
// not span attributes, a batch has many.
func endBatch(ctx context.Context, span trace.Span, outs []Outcome, err error) ([]Outcome, error) {
	defer span.End()
	if err != nil {
		return nil, failed(span, err)
	}
	for i := 0; i < len(outs); { // a run of orders of one kind (most batches are one run) counted at once
		k, n := kindOf(outs[i]), 1
		for i+n < len(outs) && kindOf(outs[i+n]) == k {
			n++
		}
		countOrders(ctx, k, int64(n))
		i += n
	}
	return outs, nil
}

// startSpan starts a span of the package's tracer. With the no-op tracer (nothing exports spans) it
// returns ctx and the span ctx holds rather than a context made to hold that same span again: a batch's
// span costs nothing then.
func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	t := otel.Tracer(scope)
	if _, ok := t.(noop.Tracer); ok {
		if span := trace.SpanFromContext(ctx); !span.IsRecording() {
			return ctx, span
		}
	}
	return t.Start(ctx, name)
}

// countOrder counts a decided order and returns the attributes it was counted under.
func countOrder(ctx context.Context, out Outcome) attribute.Set {
	return countOrders(ctx, kindOf(out), 1)
}

// countOrders counts n decided orders of kind k and returns the attributes they were counted under.
func countOrders(ctx context.Context, k outcomeKind, n int64) attribute.Set {
	c, ok := outcomeCounts.Load(k)
	if !ok {
		// A few kinds of outcome in all: each set is built once (sorted, hashed), not once per order. A
		// replayed record is read back as stored, so a tampered one could bring any words: only so many
		// kinds are kept.
		set := attribute.NewSet(AttrOutcome.String(string(k.status)), AttrReason.String(string(k.reason)),
			AttrReplayed.Bool(k.replayed))
		c = counted{set, metric.WithAttributeSet(set)}
		if outcomeKinds.Add(1) <= maxOutcomeKinds {
			outcomeCounts.Store(k, c)
		}
	}
	orders.Add(ctx, n, c.(counted).opt)
	return c.(counted).set
}

// counted is how an outcomeKind is counted: its attributes, and the option that adds them.
type counted struct {
	set attribute.Set
	opt metric.AddOption
}

func kindOf(out Outcome) outcomeKind { return outcomeKind{out.Status, out.Reason, out.Replayed} }

// outcomeKind is what an order is counted by.
type outcomeKind struct {
	status   order.Status
	reason   order.Reason
	replayed bool
}

// outcomeCounts holds how each outcomeKind seen is counted, up to maxOutcomeKinds of them (outcomeKinds
// counts the stores).
var (
	outcomeCounts sync.Map
	outcomeKinds  atomic.Int64
)

const maxOutcomeKinds = 64

// failed marks the span of a failed reserve and returns err.
func failed(span trace.Span, err error) error {
	span.RecordError(err)
	span.SetStatus(codes.Error, "reserve failed")
	return err
}
