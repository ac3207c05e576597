package delivery

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// LineStore finds the lines of an order decided before (inventory.Store.Lines).
type LineStore interface {
	Lines(ctx context.Context, orderID, sku string) ([]order.Line, error)
}

// Decoder is the step that makes a message an order, the last of the delivery steps: it decodes and
// validates the payload once (order.Decode) and puts the order in the message context (order.NewContext)
// with its lock keys and ways for the lock middleware and its Batcher (lockmw.WithKeys: its SKUs; a
// single-SKU order may be batched; elided where Elide allows). A cancel or fulfil gets the lines of its
// order (LineStore), so that the middleware takes the locks of all their SKUs; an order not known once
// every earlier entry of its partition was decided (linesOf) keeps the event's one SKU: the decision,
// under that lock, then refuses a fulfil as unknown and records a cancel as early (or, if the order was
// reserved meanwhile, fails as not locked and is retried).
type Decoder struct {
	Lines LineStore
	// Redis holds the orders streams (Partitions), read in Group: where an event looks for earlier entries
	// pending in its partition.
	Redis      redis.UniversalClient
	Partitions []order.Partition
	Group      string
	// ClaimIdle is how long an entry stays pending before another consumer claims it. A cancel or fulfil of
	// an order not known yet waits, up to earlierPendingWait at a time and twice ClaimIdle in all, while an
	// entry before its own in its partition is pending (earlierPending); 0: it waits for none.
	ClaimIdle time.Duration
	// Elide: the lock lives on the stock's Redis, and an order's stock script may take it itself when it is
	// free (lock elision: a single-SKU order's batch script, or on one Redis a basket's one script). A
	// cancel or fulfil never does.
	Elide bool
	// Cluster: the stock lives on a Redis Cluster, where a basket's SKUs are in different slots (reserved
	// line by line under their locks: never elided).
	Cluster bool
}

// ErrEarlierPending fails a cancel or fulfil of an order not known yet while an earlier entry of its
// partition is still pending (earlierPending): a transient failure, retried.
var ErrEarlierPending = errors.New("delivery: the order is not known yet and an earlier entry of its partition is still pending")

// Decode is the step.
func (d *Decoder) Decode(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := order.Decode(msg.Payload)
		if err != nil {
			return nil, err
		}
		if o.Kind() != order.TypeReserve {
			if o.Lines, err = d.linesOf(msg, o); err != nil {
				return nil, fmt.Errorf("%s order %s: %w", o.Kind(), o.OrderID, err)
			}
		}
		orig := msg.Context()
		msg.SetContext(lockmw.WithKeys(order.NewContext(orig, o), o.SKUs(), d.ways(o)))
		defer msg.SetContext(orig)
		return next(msg)
	}
}

// ways are the ways into its section o may take: a single-SKU order's batch (its script may take the lock
// itself when Elide); on one Redis a basket's one script may take all its locks when Elide. A cancel or
// fulfil always takes its locks.
func (d *Decoder) ways(o order.Order) lockmw.Ways {
	var ways lockmw.Ways
	if o.Single() {
		ways = lockmw.MayBatch
	}
	if d.Elide && (o.Single() || o.Kind() == order.TypeReserve && !d.Cluster) {
		ways |= lockmw.MayElide
	}
	return ways
}

// linesOf looks up the lines of the order a cancel or fulfil o settles; nil when the order is not known.
// Events of one order are decided in their stream order: an order not known while an earlier entry of
// the partition is pending is looked up again as that entry is decided (the earlier entries are mostly in
// flight, here or in another worker), and after earlierPendingWait fails with ErrEarlierPending, to be
// handed back; with none pending, every earlier entry was decided, so the last look finds the order if it
// was among them. (Handed back at once, a run of such events in one partition, claimed together, was
// decided one per claim round: each found the one before it pending.)
func (d *Decoder) linesOf(msg *message.Message, o order.Order) ([]order.Line, error) {
	ctx := msg.Context()
	deadline := time.Now().Add(earlierPendingWait)
	for pause := earlierPendingPoll; ; pause *= 2 {
		lines, err := d.Lines.Lines(ctx, o.OrderID, o.SKU)
		if !errors.Is(err, inventory.ErrUnknownOrder) || d.ClaimIdle == 0 {
			return lines, ignoreUnknown(err)
		}
		switch earlier, err := d.earlierPending(ctx, msg); {
		case err != nil:
			return nil, err
		case !earlier:
			lines, err = d.Lines.Lines(ctx, o.OrderID, o.SKU)
			return lines, ignoreUnknown(err)
		case !time.Now().Before(deadline):
			return nil, ErrEarlierPending
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(min(pause, time.Until(deadline))):
		}
	}
}

// How long a cancel or fulfil of an order not known yet waits for the earlier entries of its partition
// (linesOf), looking again after earlierPendingPoll, then twice as long each time.
const (
	earlierPendingWait = 500 * time.Millisecond
	earlierPendingPoll = 5 * time.Millisecond
)

// earlierPending reports whether msg, a cancel or fulfil whose order is not known yet, waits for an entry of
// its partition before its own that is still pending: for at most twice ClaimIdle in all, from the first
// time it asked (earlier.lua, in Redis's time), so that an earlier entry that stays pending that long
// (failing again and again, or stuck behind a lock held elsewhere) no longer holds the event back, while in
// a backlog, however old its entries, the event still waits for its order being decided.
func (d *Decoder) earlierPending(ctx context.Context, msg *message.Message) (bool, error) {
	part := d.Partitions[redisstream.EntryPartition(msg)]
	keys := []string{part.Orders, WaitsKey(part.Orders, d.Group)}
	wait, err := earlierScript.Run(ctx, d.Redis, keys, d.Group, redisstream.EntryID(msg), (2 * d.ClaimIdle).Milliseconds()).Int()
	return wait == 1, err
}

// WaitsKey is where the cancels and fulfils of stream that wait for its earlier entries note when they
// first asked (earlier.lua), in the stream's slot.
func WaitsKey(stream, group string) string { return stream + ":waits:" + group }

//go:embed earlier.lua
var earlierLua string

var earlierScript = redis.NewScript(earlierLua)

func ignoreUnknown(err error) error {
	if errors.Is(err, inventory.ErrUnknownOrder) {
		return nil
	}
	return err
}
