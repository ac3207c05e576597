package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// Store decides orders: *inventory.Store, or a wrapper around it (the fault tests' history recorder).
type Store interface {
	ReserveBatches(ctx context.Context, batches []inventory.Batch) []inventory.BatchResult
	// BatchesBaskets: ReserveBatches reserves a basket in its pipeline (one round trip with the batches).
	BatchesBaskets() bool
	ReserveLines(ctx context.Context, orderID string, lines []order.Line, fences inventory.Fences) (inventory.OrderOutcome, error)
	Cancel(ctx context.Context, orderID, sku string, fences inventory.Fences) (inventory.OrderOutcome, error)
	Fulfil(ctx context.Context, orderID, sku string, fences inventory.Fences) (inventory.OrderOutcome, error)
	Lines(ctx context.Context, orderID, sku string) ([]order.Line, error)
}

// Config is what the handler needs.
type Config struct {
	// Store decides the orders. Required.
	Store Store
	// Redis takes the outcome events. Required.
	Redis redis.UniversalClient
	// Partitions are the streams of the orders' partitions: an order's outcome goes to the results stream
	// of the partition its entry was read from (redisstream.EntryPartition).
	Partitions []order.Partition
	// Group is the consumer group the orders are read in: an outcome is published only for an entry still
	// pending to Consumer in it. Required.
	Group string
	// ResultsMaxLen caps the results streams (XADD MAXLEN ~); 0: no cap.
	ResultsMaxLen int64
	// Cluster: Redis is a cluster, where one call cannot span slots (a basket then goes line by line).
	Cluster bool
	// Elide: the lock lives on the stock's Redis, and an order's stock script may take it itself when it is
	// free (lock elision: a single-SKU order's batch script, or on one Redis a basket's one script). Decode
	// tells the lock middleware which orders may (lockmw.WithKeys); a cancel or fulfil never does.
	Elide bool
	// Worker names this worker in outcome events.
	Worker string
	// Consumer is the worker's name in Group, under which it reads the orders; "" means Worker.
	Consumer string
	// Logger logs what the handler does not return as an error (an outcome left to the consumer that
	// claimed its entry); nil means slog.Default().
	Logger *slog.Logger
	// MaxWait bounds how long an order waits in Combine for a batch, as LOCK_WAIT bounds a lock wait; 0:
	// no bound.
	MaxWait time.Duration
	// ClaimIdle is how long an entry stays pending before another consumer claims it. A cancel or fulfil of
	// an order not known yet waits, up to earlierPendingWait, while an entry before its own in its partition
	// is pending (earlierPending), one published less than twice ClaimIdle ago; 0: it waits for none.
	ClaimIdle time.Duration
}

// ErrEarlierPending fails a cancel or fulfil of an order not known yet while an earlier entry of its
// partition is still pending (earlierPending): a transient failure, retried.
var ErrEarlierPending = errors.New("handlers: the order is not known yet and an earlier entry of its partition is still pending")

// Handler decides orders. Its steps are Decode and Combine (middlewares, ahead of the lock middleware)
// and Handle (the handler, inside the lock).
type Handler struct {
	cfg       Config
	combiner  *combiner
	committer *committer
	server    []attribute.KeyValue // the Redis's address, for the spans of the outcome events
}

// New returns the handler of cfg.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, server: redisstream.ServerAttributes(cfg.Redis)}
	h.committer = &committer{h: h}
	h.combiner = newCombiner(cfg.MaxWait, h.committer)
	return h
}

// Decode decodes and validates the order of each message once and puts it in the message context
// (OrderOf), with its lock keys for the lock middleware (lockmw.WithKeys: its SKUs, and whether its stock
// script may take their locks itself). A cancel or fulfil gets the lines of its order (Store.Lines), so that the lock middleware
// takes the locks of all their SKUs; an order not known once every earlier entry of its partition was
// decided (linesOf) keeps the event's one SKU: the decision, under that lock, then refuses a fulfil as
// unknown and records a cancel as early (or, if the order was reserved meanwhile, fails as not locked and
// is retried).
func (h *Handler) Decode(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := order.Decode(msg.Payload)
		if err != nil {
			return nil, err
		}
		if o.Kind() != order.TypeReserve {
			if o.Lines, err = h.linesOf(msg, o); err != nil {
				return nil, fmt.Errorf("%s order %s: %w", o.Kind(), o.OrderID, err)
			}
		}
		orig := msg.Context()
		msg.SetContext(lockmw.WithKeys(WithOrder(orig, o), o.SKUs(), h.elidable(o)))
		defer msg.SetContext(orig)
		return next(msg)
	}
}

// linesOf looks up the lines of the order a cancel or fulfil o settles; nil when the order is not known.
// Events of one order are decided in their stream order: an order not known while an earlier entry of
// the partition is pending is looked up again as that entry is decided (the earlier entries are mostly in
// flight, here or in another worker), and after earlierPendingWait fails with ErrEarlierPending, to be
// handed back; with none pending, every earlier entry was decided, so the last look finds the order if it
// was among them. (Handed back at once, a run of such events in one partition, claimed together, was
// decided one per claim round: each found the one before it pending.)
func (h *Handler) linesOf(msg *message.Message, o order.Order) ([]order.Line, error) {
	ctx := msg.Context()
	deadline := time.Now().Add(earlierPendingWait)
	for pause := earlierPendingPoll; ; pause *= 2 {
		lines, err := h.cfg.Store.Lines(ctx, o.OrderID, o.SKU)
		if !errors.Is(err, inventory.ErrUnknownOrder) || h.cfg.ClaimIdle == 0 {
			return lines, ignoreUnknown(err)
		}
		switch earlier, err := h.earlierPending(ctx, msg); {
		case err != nil:
			return nil, err
		case !earlier:
			lines, err = h.cfg.Store.Lines(ctx, o.OrderID, o.SKU)
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

// earlierPending reports whether an entry of msg's partition before msg's own is pending in the group, for
// an entry published less than twice ClaimIdle ago: an earlier entry that stays pending longer than that
// (failing again and again, or stuck behind a lock held elsewhere) no longer holds the event back, which is
// then decided as it finds its order. An id more than ClaimIdle ahead of the clock (a producer chose it:
// every later entry of the partition then has its time too) says nothing of when the entry was published,
// so the event waits for none either: the bound holds, and the decision is the one a wait would end in.
func (h *Handler) earlierPending(ctx context.Context, msg *message.Message) (bool, error) {
	id := redisstream.EntryID(msg)
	if ms, _, ok := strings.Cut(id, "-"); ok {
		if t, err := strconv.ParseInt(ms, 10, 64); err == nil {
			if age := time.Since(time.UnixMilli(t)); age > 2*h.cfg.ClaimIdle || age < -h.cfg.ClaimIdle {
				return false, nil
			}
		}
	}
	part := h.cfg.Partitions[redisstream.EntryPartition(msg)]
	return redisstream.EarlierPending(ctx, h.cfg.Redis, part.Orders, h.cfg.Group, id)
}

func ignoreUnknown(err error) error {
	if errors.Is(err, inventory.ErrUnknownOrder) {
		return nil
	}
	return err
}

// Combine is the batching step, ahead of the lock: the first order of a SKU in this process leads (goes on
// to the lock and Handle); the others wait here until a batch of the leader's decides them (combine.go).
func (h *Handler) Combine(next message.HandlerFunc) message.HandlerFunc {
	return h.combiner.step(next)
}

// Handle decides the message's order in the section the lock middleware obtained (lockmw.SectionFrom;
// none without a lock: unfenced). A single-SKU order's consumer leads its SKU: it decides the SKU's
// waiting orders in batches, its own in the first. A basket or a lifecycle event is decided alone (on one
// Redis a basket's script goes in a commit round's pipeline with the batches').
func (h *Handler) Handle(msg *message.Message) ([]*message.Message, error) {
	o, err := OrderOf(msg)
	if err != nil {
		return nil, err
	}
	sec, _ := lockmw.SectionFrom(msg.Context())
	if !o.Single() {
		return nil, h.decideOrder(msg, o, sec)
	}
	return nil, h.combiner.lead(msg, o.SKU, sec)
}

// elidable reports whether o can be decided in an elided section, its stock script taking the locks itself
// when nobody holds them: a single-SKU order (its batch script), or on one Redis a basket (its one script; a
// cluster reserves a basket line by line, under its locks). A cancel or fulfil always takes its locks.
func (h *Handler) elidable(o order.Order) bool {
	return h.cfg.Elide && (o.Single() || o.Kind() == order.TypeReserve && !h.cfg.Cluster)
}

// OrderOf returns the order of a message that Decode decoded.
func OrderOf(msg *message.Message) (order.Order, error) {
	o, ok := OrderFrom(msg.Context())
	if !ok {
		return o, fmt.Errorf("%w: message %s was not decoded", order.ErrBadInput, msg.UUID)
	}
	return o, nil
}
