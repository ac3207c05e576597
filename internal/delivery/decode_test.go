package delivery

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// earlierDecoder is a Decoder with just what earlierPending reads: one partition, "orders", group g, its
// Redis, a claim idle time of 30 s.
func earlierDecoder(t *testing.T) (*Decoder, *redis.Client) {
	rdb := redistest.Start(t).Client()
	parts := order.Partitions(1, false, "orders", "results", "poison")
	if err := rdb.XGroupCreateMkStream(context.Background(), parts[0].Orders, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	return &Decoder{Redis: rdb, Partitions: parts, Group: "g", ClaimIdle: 30 * time.Second}, rdb
}

// pend adds an entry with id (or "*") and reads it as consumer c, so that it is pending; it returns its id.
func pend(t *testing.T, rdb *redis.Client, id string) string {
	ctx := context.Background()
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: id, Values: []string{"payload", "p"}}).Result()
	if err == nil {
		err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}}).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A cancel's or fulfil's own entry, pending while it is handled, is not an earlier one; an entry before it is.
func TestAnEventsOwnEntryIsNotAnEarlierPendingOne(t *testing.T) {
	w, rdb := earlierDecoder(t)
	first := pend(t, rdb, "*")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(first)); err != nil || earlier {
		t.Fatalf("the only pending entry, the event's own: earlier %v, %v; want false", earlier, err)
	}
	second := pend(t, rdb, "*")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(second)); err != nil || !earlier {
		t.Fatalf("an entry before the event's pending: earlier %v, %v; want true", earlier, err)
	}
}

// In a backlog, however old the entries (published in 1970 here), an event still waits for the earlier
// entry that is pending, its order perhaps being decided by another worker right now.
func TestAnOldEventStillWaitsForAnEarlierEntry(t *testing.T) {
	w, rdb := earlierDecoder(t)
	pend(t, rdb, "1000-0")
	old := pend(t, rdb, "2000-0")
	if earlier, err := w.earlierPending(context.Background(), entryMessage(old)); err != nil || !earlier {
		t.Fatalf("an old event behind a pending entry: earlier %v, %v; want true", earlier, err)
	}
	if first := rdb.HGet(context.Background(), WaitsKey("orders", "g"), old).Val(); first == "" {
		t.Fatalf("the event's first ask is not noted")
	}
}

// An event waits at most twice CLAIM_IDLE in all, from the first time it asked, whatever its id says (an id
// a producer set in the year 2100 too): an earlier entry that stays pending that long (failing again and
// again) no longer holds it back; its note is then removed.
func TestAnEventWaitsTwiceClaimIdleAtMostFromItsFirstAsk(t *testing.T) {
	w, rdb := earlierDecoder(t)
	ctx := context.Background()
	pend(t, rdb, "*")
	event := pend(t, rdb, "4102444800000-0")
	if earlier, err := w.earlierPending(ctx, entryMessage(event)); err != nil || !earlier {
		t.Fatalf("first ask: earlier %v, %v; want true", earlier, err)
	}
	asked := time.Now().Add(-2*w.ClaimIdle - time.Second).UnixMilli() // as if it first asked a minute ago
	rdb.HSet(ctx, WaitsKey("orders", "g"), event, asked)
	if earlier, err := w.earlierPending(ctx, entryMessage(event)); err != nil || earlier {
		t.Fatalf("after twice CLAIM_IDLE of waiting: earlier %v, %v; want false", earlier, err)
	}
	if n := rdb.HLen(ctx, WaitsKey("orders", "g")).Val(); n != 0 {
		t.Errorf("%d first asks noted after the event went ahead; want none", n)
	}
}

// entryMessage is the message of entry id as the subscriber hands it over.
func entryMessage(id string) *message.Message {
	return redisstream.Entry{ID: id, Values: map[string]any{"payload": "p"}}.Message()
}

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

// decodeLines runs d's Decode on msg and returns the lines it gave the order.
func decodeLines(d *Decoder, msg *message.Message) ([]order.Line, error) {
	var got []order.Line
	_, err := d.Decode(func(msg *message.Message) ([]*message.Message, error) {
		o, _ := order.FromContext(msg.Context())
		got = o.Lines
		return nil, nil
	})(msg)
	return got, err
}

// A cancel of an order not known yet waits in place while an earlier entry of its partition is pending,
// and finds the order once that entry (its order) is decided; when the earlier entry stays pending it is
// handed back with ErrEarlierPending after earlierPendingWait, having looked a few times, not hundreds.
func TestACancelWaitsForTheEarlierEntryItsOrderIsIn(t *testing.T) {
	h, rdb := earlierDecoder(t)
	store := &decidingStore{Store: inventory.New(rdb), rdb: rdb, decideAt: 3}
	h.Lines = store
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
	h, rdb := earlierDecoder(t)
	store := &decidingStore{Store: inventory.New(rdb), rdb: rdb, decideAt: 1} // decided right after the first look
	h.Lines = store
	if err := store.SetStock(context.Background(), "A", 10); err != nil {
		t.Fatal(err)
	}
	store.earlier = pend(t, rdb, "*")
	got, err := decodeLines(h, cancelEntry(pend(t, rdb, "*"), "o-1"))
	if err != nil || len(got) != 1 {
		t.Fatalf("cancel whose order was decided as the pending entries were read: lines %v, %v; want the order's line", got, err)
	}
}

// The decoder tells the lock middleware each order's SKUs and its ways into their section: a single-SKU
// order may be batched, and elided where the lock allows; a basket elided on one Redis only; a cancel or
// fulfil neither.
func TestDecodeGivesEachOrderItsKeysAndWays(t *testing.T) {
	for _, tc := range []struct {
		name           string
		elide, cluster bool
		payload        string
		keys           string
		ways           lockmw.Ways
	}{
		{"single, lock elision on", true, false, `{"order_id":"o","sku":"B","quantity":1}`, "B", lockmw.MayBatch | lockmw.MayElide},
		{"single, lock elision off", false, false, `{"order_id":"o","sku":"B","quantity":1}`, "B", lockmw.MayBatch},
		{"basket, one Redis", true, false, `{"order_id":"o","lines":[{"sku":"B","quantity":1},{"sku":"A","quantity":2}]}`, "A,B", lockmw.MayElide},
		{"basket, a cluster", true, true, `{"order_id":"o","lines":[{"sku":"B","quantity":1},{"sku":"A","quantity":2}]}`, "A,B", 0},
		{"cancel of an order not known", true, false, `{"type":"cancel","order_id":"o","sku":"B"}`, "B", 0},
		{"cancel of a basket reserved before: all its SKUs", true, false, `{"type":"cancel","order_id":"known","sku":"C"}`, "C,D", 0},
		{"fulfil of a basket reserved before: all its SKUs", true, false, `{"type":"fulfil","order_id":"known","sku":"D"}`, "C,D", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redistest.Start(t).Client()
			store := inventory.New(rdb)
			for _, sku := range []string{"C", "D"} {
				if err := store.SetStock(ctx, sku, 5); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := store.ReserveLines(ctx, "known", []order.Line{{SKU: "D", Quantity: 1}, {SKU: "C", Quantity: 1}}, nil); err != nil {
				t.Fatal(err)
			}
			d := &Decoder{Lines: store, Elide: tc.elide, Cluster: tc.cluster}
			msg := entryMessage("1-0")
			msg.Payload = []byte(tc.payload)
			var keys []string
			var ways lockmw.Ways
			var o order.Order
			_, err := d.Decode(func(msg *message.Message) ([]*message.Message, error) {
				keys, ways, _ = lockmw.KeysFrom(msg.Context())
				o, _ = order.FromContext(msg.Context())
				return nil, nil
			})(msg)
			if err != nil || strings.Join(keys, ",") != tc.keys || ways != tc.ways {
				t.Fatalf("keys %v, ways %b, %v; want %s, %b", keys, ways, err, tc.keys, tc.ways)
			}
			if o.OrderID == "" || !strings.Contains(tc.payload, o.OrderID) {
				t.Fatalf("the order in the context is %+v, want the decoded one", o)
			}
		})
	}
}

// A payload that is no valid order fails as bad input (poisoned), and the next step never runs.
func TestDecodeRefusesABadPayloadAsBadInput(t *testing.T) {
	d := &Decoder{}
	for _, payload := range []string{`{"order_id":"o","sku":"B"}`, `not json`, `{"order_id":"o","sku":"B","quantity":0}`} {
		msg := entryMessage("1-0")
		msg.Payload = []byte(payload)
		ran := false
		_, err := d.Decode(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })(msg)
		if !errors.Is(err, order.ErrBadInput) || ran {
			t.Errorf("payload %s: %v, next step ran %v; want order.ErrBadInput and no next step", payload, err, ran)
		}
	}
}
