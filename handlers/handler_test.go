package handlers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A cancel of an order not known yet waits in place while an earlier entry of its partition is pending,
// and finds the order once that entry (its order) is decided; when the earlier entry stays pending it is
// handed back with ErrEarlierPending after earlierPendingWait, having looked a few times, not hundreds.
func TestACancelWaitsForTheEarlierEntryItsOrderIsIn(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "A", 10); err != nil {
		t.Fatal(err)
	}
	var looks atomic.Int32
	decideOnLook := int32(3) // the earlier entry, the order, is decided as the third look finds it pending
	h := New(Config{Store: store, Redis: rdb, EarlierPending: func(context.Context, *message.Message) (bool, error) {
		n := looks.Add(1)
		if n == decideOnLook {
			if _, err := store.ReserveLines(ctx, "o-1", []order.Line{{SKU: "A", Quantity: 2}}, nil); err != nil {
				t.Error(err)
			}
		}
		return n <= decideOnLook, nil
	}})
	var got []order.Line
	decode := h.Decode(func(msg *message.Message) ([]*message.Message, error) {
		o, err := OrderOf(msg)
		got = o.Lines
		return nil, err
	})
	cancel := func() error {
		_, err := decode(message.NewMessage("1-1", []byte(`{"type":"cancel","order_id":"o-1","sku":"A"}`)))
		return err
	}
	if err := cancel(); err != nil || len(got) != 1 || got[0].Quantity != 2 {
		t.Fatalf("cancel after its order was decided meanwhile: lines %v, %v; want the order's line", got, err)
	}

	looks.Store(0)
	decideOnLook = 1 << 30 // never
	_, err := decode(message.NewMessage("1-2", []byte(`{"type":"cancel","order_id":"o-2","sku":"A"}`)))
	if !errors.Is(err, ErrEarlierPending) {
		t.Fatalf("cancel while an earlier entry stays pending: %v, want ErrEarlierPending", err)
	}
	if n := looks.Load(); n < 3 || n > 10 {
		t.Fatalf("looked %d times at the pending entries in %v, want a few, each twice as long after the last", n, earlierPendingWait)
	}
}

// With no earlier entry pending any more, a cancel looks at its order's lines once more before it gives up on
// it: the earlier entry, the order, may have been decided between the first look and the check of the
// pending entries.
func TestACancelLooksOnceMoreWhenNoEarlierEntryIsPending(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "A", 10); err != nil {
		t.Fatal(err)
	}
	h := New(Config{Store: store, Redis: rdb, EarlierPending: func(context.Context, *message.Message) (bool, error) {
		// The earlier entry is decided as the pending entries are read: none is pending now.
		if _, err := store.ReserveLines(ctx, "o-1", []order.Line{{SKU: "A", Quantity: 2}}, nil); err != nil {
			t.Error(err)
		}
		return false, nil
	}})
	var got []order.Line
	decode := h.Decode(func(msg *message.Message) ([]*message.Message, error) {
		o, err := OrderOf(msg)
		got = o.Lines
		return nil, err
	})
	if _, err := decode(message.NewMessage("1-1", []byte(`{"type":"cancel","order_id":"o-1","sku":"A"}`))); err != nil || len(got) != 1 {
		t.Fatalf("cancel whose order was decided as the pending entries were read: lines %v, %v; want the order's line", got, err)
	}
}
