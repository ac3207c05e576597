package handlers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// decidingStore is the stock store of a test in which the earlier entry of a cancel, its order o-1, is
// decided (reserved, and its entry acked) as the cancel looks up its order's lines for the decideAt-th time.
type decidingStore struct {
	*inventory.Store
	rdb      *redis.Client
	earlier  string // the order's entry, acked once decided
	decideAt int32
	looks    atomic.Int32
}

func (s *decidingStore) Lines(ctx context.Context, orderID, sku string) ([]order.Line, error) {
	lines, err := s.Store.Lines(ctx, orderID, sku)
	if s.looks.Add(1) == s.decideAt {
		if _, err := s.ReserveLines(ctx, "o-1", []order.Line{{SKU: "A", Quantity: 2}}, nil); err != nil {
			return nil, err
		}
		if err := s.rdb.XAck(ctx, "orders", "g", s.earlier).Err(); err != nil {
			return nil, err
		}
	}
	return lines, err
}

// cancelEntry is the message of a cancel of orderID read as entry id (pending to consumer c).
func cancelEntry(id, orderID string) *message.Message {
	msg := entryMessage(id)
	msg.Payload = []byte(`{"type":"cancel","order_id":"` + orderID + `","sku":"A"}`)
	return msg
}

// decodeLines runs h's Decode on msg and returns the lines it gave the order.
func decodeLines(h *Handler, msg *message.Message) ([]order.Line, error) {
	var got []order.Line
	_, err := h.Decode(func(msg *message.Message) ([]*message.Message, error) {
		o, err := OrderOf(msg)
		got = o.Lines
		return nil, err
	})(msg)
	return got, err
}

// A cancel of an order not known yet waits in place while an earlier entry of its partition is pending,
// and finds the order once that entry (its order) is decided; when the earlier entry stays pending it is
// handed back with ErrEarlierPending after earlierPendingWait, having looked a few times, not hundreds.
func TestACancelWaitsForTheEarlierEntryItsOrderIsIn(t *testing.T) {
	h, rdb := earlierHandler(t, nil)
	store := &decidingStore{Store: inventory.New(rdb), rdb: rdb, decideAt: 3}
	h.cfg.Store = store
	if err := store.SetStock(context.Background(), "A", 10); err != nil {
		t.Fatal(err)
	}
	store.earlier = pend(t, rdb, "*")
	got, err := decodeLines(h, cancelEntry(pend(t, rdb, "*"), "o-1"))
	if err != nil || len(got) != 1 || got[0].Quantity != 2 {
		t.Fatalf("cancel after its order was decided meanwhile: lines %v, %v; want the order's line", got, err)
	}

	store.looks.Store(0)
	store.decideAt = 1 << 30 // never: the earlier entry stays pending
	pend(t, rdb, "*")
	_, err = decodeLines(h, cancelEntry(pend(t, rdb, "*"), "o-2"))
	if !errors.Is(err, ErrEarlierPending) {
		t.Fatalf("cancel while an earlier entry stays pending: %v, want ErrEarlierPending", err)
	}
	if n := store.looks.Load(); n < 3 || n > 10 {
		t.Fatalf("looked %d times for the order in %v, want a few, each twice as long after the last", n, earlierPendingWait)
	}
}

// With no earlier entry pending any more, a cancel looks at its order's lines once more before it gives up on
// it: the earlier entry, the order, may have been decided between the first look and the check of the
// pending entries.
func TestACancelLooksOnceMoreWhenNoEarlierEntryIsPending(t *testing.T) {
	h, rdb := earlierHandler(t, nil)
	store := &decidingStore{Store: inventory.New(rdb), rdb: rdb, decideAt: 1} // decided right after the first look
	h.cfg.Store = store
	if err := store.SetStock(context.Background(), "A", 10); err != nil {
		t.Fatal(err)
	}
	store.earlier = pend(t, rdb, "*")
	got, err := decodeLines(h, cancelEntry(pend(t, rdb, "*"), "o-1"))
	if err != nil || len(got) != 1 {
		t.Fatalf("cancel whose order was decided as the pending entries were read: lines %v, %v; want the order's line", got, err)
	}
}
