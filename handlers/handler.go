package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
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
	// Outcomes publishes the outcome events, each the answer to its order's entry (redisstream.Answer): a
	// redisstream.Publisher with the consumer's ConsumerGroup and Consumer, which writes an answer only while
	// its entry is still pending to the consumer (wrapped in a redisstream.TracingPublisher for their spans).
	// Required.
	Outcomes message.Publisher
	// ResultsTopic is the topic of the outcome events: an order read from partition i of its topic gets its
	// outcome in partition i of ResultsTopic (redisstream.Answer).
	ResultsTopic string
	// Worker names this worker in outcome events.
	Worker string
	// Logger logs what the handler does not return as an error (an outcome left to the consumer that
	// claimed its entry); nil means slog.Default().
	Logger *slog.Logger
	// Batcher is the step ahead of the lock middleware in which the single-SKU orders of a SKU wait for a
	// batch of its leader, whose Handle takes them (Batcher.Take) and hands them their outcome
	// (Batcher.Done). Required: a single-SKU order that reaches Handle without passing through its
	// Middleware fails.
	Batcher *lockmw.Batcher
}

// Handler decides orders (Handle), in the section the lock middleware obtained, after the delivery steps
// decoded them (delivery.Decoder) and the lock middleware's Batcher made the first order of a SKU in this
// process its leader.
type Handler struct {
	cfg       Config
	committer *committer
	leadFor   time.Duration // how long one consumer leads a SKU: leadFor
}

// New returns the handler of cfg.
func New(cfg Config) *Handler {
	if cfg.Outcomes == nil {
		panic("handlers: Config.Outcomes is nil: the outcome events need a publisher")
	}
	if cfg.Batcher == nil {
		cfg.Batcher = &lockmw.Batcher{} // its queues stay empty: single-SKU orders fail (errNotQueued)
	}
	h := &Handler{cfg: cfg, leadFor: leadFor}
	h.committer = &committer{h: h}
	return h
}

// Handle decides the message's order in the section the lock middleware obtained (lockmw.SectionFrom;
// none without a lock: unfenced). A single-SKU order's consumer leads its SKU: it decides the SKU's
// waiting orders in batches, its own in the first. A basket or a lifecycle event is decided alone (on one
// Redis a basket's script goes in a commit round's pipeline with the batches').
func (h *Handler) Handle(msg *message.Message) ([]*message.Message, error) {
	o, err := orderOf(msg)
	if err != nil {
		return nil, err
	}
	sec, _ := lockmw.SectionFrom(msg.Context())
	if !o.Single() {
		return nil, h.decideOrder(msg, o, sec)
	}
	return nil, h.lead(msg, o.SKU, sec)
}

// orderOf returns the order of a message that delivery.Decoder decoded.
func orderOf(msg *message.Message) (order.Order, error) {
	o, ok := order.FromContext(msg.Context())
	if !ok {
		return o, fmt.Errorf("%w: message %s was not decoded", order.ErrBadInput, msg.UUID)
	}
	return o, nil
}
