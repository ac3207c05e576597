package inventory_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// orderCounts collects the stockflow.orders counter by attribute set. The counter is a package variable
// tied to the first meter provider set, so the provider is set once for the test process.
var orderCounts = sync.OnceValue(func() func(*testing.T) map[attribute.Distinct]int64 {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return func(t *testing.T) map[attribute.Distinct]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		out := map[attribute.Distinct]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "stockflow.orders" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					out[dp.Attributes.Equivalent()] += dp.Value
				}
			}
		}
		return out
	}
})

// The stock span carries the order and its outcome under the stockflow.stock attributes, and the orders
// counter counts the outcome under the same keys.
func TestReserveSpanAndCounterUseTheStockAttributes(t *testing.T) {
	counts := orderCounts()
	spans := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	ctx := context.Background()
	store := inventory.New(redistest.Start(t).Client())
	if err := store.SetStock(ctx, "SKU-1", 2); err != nil {
		t.Fatal(err)
	}
	before := counts(t)
	reserve := func(id string, quantity, fence int64) error {
		_, err := store.Reserve(ctx, inventory.Order{ID: id, SKU: "SKU-1", Quantity: quantity}, fence)
		return err
	}
	for _, err := range []error{reserve("o-1", 2, 5), reserve("o-2", 1, 6), reserve("o-1", 2, 7)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := reserve("o-3", 1, 4); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 4 after 7: %v, want ErrStaleFence", err)
	}

	want := [][]attribute.KeyValue{
		{inventory.AttrSKU.String("SKU-1"), inventory.AttrQuantity.Int64(2), inventory.AttrFence.Int64(5),
			inventory.AttrOutcome.String("reserved"), inventory.AttrReason.String(""), inventory.AttrReplayed.Bool(false)},
		{inventory.AttrSKU.String("SKU-1"), inventory.AttrQuantity.Int64(1), inventory.AttrFence.Int64(6),
			inventory.AttrOutcome.String("rejected"), inventory.AttrReason.String("insufficient_stock"), inventory.AttrReplayed.Bool(false)},
		{inventory.AttrSKU.String("SKU-1"), inventory.AttrQuantity.Int64(2), inventory.AttrFence.Int64(7),
			inventory.AttrOutcome.String("reserved"), inventory.AttrReason.String(""), inventory.AttrReplayed.Bool(true)},
		{inventory.AttrSKU.String("SKU-1"), inventory.AttrQuantity.Int64(1), inventory.AttrFence.Int64(4)},
	}
	ended := spans.Ended()
	if len(ended) != len(want) {
		t.Fatalf("%d spans, want one per Reserve (%d)", len(ended), len(want))
	}
	for i, sp := range ended {
		if sp.Name() != inventory.SpanReserve || sp.Name() != "stock reserve" {
			t.Errorf("span %d is named %q, want %q", i, sp.Name(), inventory.SpanReserve)
		}
		checkAttrs(t, sp, want[i])
	}
	if last := ended[len(ended)-1]; last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Errorf("the refused Reserve's span: status %v, %d events; want the error recorded", last.Status(), len(last.Events()))
	}

	// The counter: the three decided orders, by outcome; the refused one is not counted.
	after := counts(t)
	for i, attrs := range want[:3] {
		set := ptr(attribute.NewSet(attrs[3:]...)).Equivalent()
		if got := after[set] - before[set]; got != 1 {
			t.Errorf("stockflow.orders{%v} rose by %d for order %d, want 1 (counts %v)", attrs[3:], got, i, after)
		}
	}
	if total(after)-total(before) != 3 {
		t.Errorf("stockflow.orders rose by %d, want 3", total(after)-total(before))
	}
}

// checkAttrs fails unless the span has exactly the attributes want, every one of ours under stockflow.stock.
func checkAttrs(t *testing.T, sp sdktrace.ReadOnlySpan, want []attribute.KeyValue) {
	t.Helper()
	got := attribute.NewSet(sp.Attributes()...)
	if !got.Equals(ptr(attribute.NewSet(slices.Clone(want)...))) { // NewSet sorts its argument
		t.Errorf("span %q attributes %v, want %v", sp.Name(), got.ToSlice(), want)
	}
	for _, kv := range sp.Attributes() {
		if !strings.HasPrefix(string(kv.Key), "stockflow.stock.") {
			t.Errorf("span attribute %s is not under stockflow.stock", kv.Key)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func total(m map[attribute.Distinct]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// A batch is one span with the SKU, the fence and the batch size; the orders counter counts each order
// under its own outcome, as for Reserve.
func TestReserveBatchSpanAndCounter(t *testing.T) {
	counts := orderCounts()
	spans := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	ctx := context.Background()
	store := inventory.New(redistest.Start(t).Client())
	if err := store.SetStock(ctx, "SKU-1", 2); err != nil {
		t.Fatal(err)
	}
	before := counts(t)
	batch := []inventory.Order{{ID: "o-1", SKU: "SKU-1", Quantity: 2}, {ID: "o-2", SKU: "SKU-1", Quantity: 1},
		{ID: "o-1", SKU: "SKU-1", Quantity: 2}}
	if _, err := store.ReserveBatch(ctx, batch, 5); err != nil {
		t.Fatal(err)
	}
	// o-2 has an outcome: replayed unchecked, whatever the token. A new order with token 4 is refused.
	if outs, err := store.ReserveBatch(ctx, batch[1:2], 4); err != nil || !outs[0].Replayed {
		t.Fatalf("a replay with token 4: %+v, %v", outs, err)
	}
	if _, err := store.ReserveBatch(ctx, []inventory.Order{{ID: "o-3", SKU: "SKU-1", Quantity: 1}}, 4); !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("token 4 after 5: %v, want ErrStaleFence", err)
	}

	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans, want one per ReserveBatch (3)", len(ended))
	}
	for i, size := range []int{3, 1, 1} {
		if ended[i].Name() != inventory.SpanReserveBatch || ended[i].Name() != "stock reserve batch" {
			t.Errorf("span %d is named %q, want %q", i, ended[i].Name(), inventory.SpanReserveBatch)
		}
		checkAttrs(t, ended[i], []attribute.KeyValue{inventory.AttrSKU.String("SKU-1"),
			inventory.AttrFence.Int64([]int64{5, 4, 4}[i]), inventory.AttrBatchSize.Int(size),
			inventory.AttrLockElided.Bool(false)})
	}
	if last := ended[2]; last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Errorf("the refused batch's span: status %v, %d events; want the error recorded", last.Status(), len(last.Events()))
	}

	// The counter: each decided order under its outcome (o-2 twice: decided, then replayed); the refused
	// batch is not counted.
	after := counts(t)
	for _, w := range []struct {
		attrs []attribute.KeyValue
		n     int64
	}{
		{[]attribute.KeyValue{inventory.AttrOutcome.String("reserved"), inventory.AttrReason.String(""), inventory.AttrReplayed.Bool(false)}, 1},
		{[]attribute.KeyValue{inventory.AttrOutcome.String("rejected"), inventory.AttrReason.String("insufficient_stock"), inventory.AttrReplayed.Bool(false)}, 1},
		{[]attribute.KeyValue{inventory.AttrOutcome.String("reserved"), inventory.AttrReason.String(""), inventory.AttrReplayed.Bool(true)}, 1},
		{[]attribute.KeyValue{inventory.AttrOutcome.String("rejected"), inventory.AttrReason.String("insufficient_stock"), inventory.AttrReplayed.Bool(true)}, 1},
	} {
		set := ptr(attribute.NewSet(w.attrs...)).Equivalent()
		if got := after[set] - before[set]; got != w.n {
			t.Errorf("stockflow.orders{%v} rose by %d, want %d", w.attrs, got, w.n)
		}
	}
	if total(after)-total(before) != 4 {
		t.Errorf("stockflow.orders rose by %d, want 4", total(after)-total(before))
	}
}

// A batch's orders of one outcome are counted together (one Add of n): each of them still counts.
func TestReserveBatchCountsEveryOrderOfARunOfOneOutcome(t *testing.T) {
	counts := orderCounts()
	ctx := context.Background()
	store := inventory.New(redistest.Start(t).Client())
	if err := store.SetStock(ctx, "SKU-1", 3); err != nil {
		t.Fatal(err)
	}
	before := counts(t)
	var batch []inventory.Order
	for _, id := range []string{"o-1", "o-2", "o-3", "o-4", "o-5"} { // 3 reserved, then 2 rejected
		batch = append(batch, inventory.Order{ID: id, SKU: "SKU-1", Quantity: 1})
	}
	if _, err := store.ReserveBatch(ctx, batch, 0); err != nil {
		t.Fatal(err)
	}
	after := counts(t)
	reserved := ptr(attribute.NewSet(inventory.AttrOutcome.String("reserved"), inventory.AttrReason.String(""),
		inventory.AttrReplayed.Bool(false))).Equivalent()
	rejected := ptr(attribute.NewSet(inventory.AttrOutcome.String("rejected"),
		inventory.AttrReason.String("insufficient_stock"), inventory.AttrReplayed.Bool(false))).Equivalent()
	if r, j := after[reserved]-before[reserved], after[rejected]-before[rejected]; r != 3 || j != 2 {
		t.Fatalf("stockflow.orders rose by %d reserved and %d rejected, want 3 and 2", r, j)
	}
}
