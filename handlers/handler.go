package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
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
	// its entry is still pending to the consumer (and traces each with a producer span). Required.
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
// It is a message.NoPublishHandlerFunc: the outcome events go out through Config.Outcomes.
func (h *Handler) Handle(msg *message.Message) error {
	o, err := orderOf(msg)
	if err != nil {
		return err
	}
	sec, _ := lockmw.SectionFrom(msg.Context())
	if !o.Single() {
		return h.decideOrder(msg, o, sec)
	}
	return h.lead(msg, o.SKU, sec)
}

// orderOf returns the order of a message that delivery.Decoder decoded.
func orderOf(msg *message.Message) (order.Order, error) {
	o, ok := order.FromContext(msg.Context())
	if !ok {
		return o, fmt.Errorf("%w: message %s was not decoded", order.ErrBadInput, msg.UUID)
	}
	return o, nil
}

// The single-SKU orders of a SKU that arrive while another order of it is being decided in this process
// wait in the lock middleware's Batcher; the first one leads: it goes on to the lock middleware, which
// obtains the SKU's exclusive section, and in it Handle decides the SKU's waiting orders in batches of up
// to inventory.MaxBatch (lead), each batch taken from the Batcher when its commit round starts (commit.go),
// one stock script call in the round's pipeline and one commit call with the round's outcome events. A
// leader leads for at most leadFor, then hands the lead to the oldest waiting order, whose consumer obtains
// the section anew: the lock's hand-off bound (rlock.HandOff) then lets other processes have their turn. In
// an elided section (the lock taken inside each batch's script) a batch that finds the lock held goes back
// to the head of the queue, and the leader whose own order is still waiting returns lockmw.ErrLocked: the
// middleware then takes the lock.
//
// Every order gets the outcome it would have got alone (a batch decides in arrival order, as one call per
// order would), and a failed batch leaves every order of it to be retried, as a failed order is alone.

// leadFor is how long one consumer leads a SKU before handing the lead on: the lock's hand-off bound.
const leadFor = rlock.DefaultHandOffHold

// ErrPanicked is what the orders of a batch whose decision panicked get (commit.go): a failure that counts
// towards MAX_ATTEMPTS, so an order whose data makes the decision panic ends in the poison stream.
var ErrPanicked = errors.New("handlers: deciding the order's batch panicked")

// errNotQueued: a leader found its own order in no queue: the chain has no Config.Batcher ahead of the
// lock middleware and the handler.
var errNotQueued = errors.New("handlers: a single-SKU order reached the handler without waiting in the Batcher (Config.Batcher, ahead of the lock middleware)")

// errTakeLock: an elided batch decided nothing and goes back to be decided under the lock.
var errTakeLock = errors.New("handlers: the batch is to be decided under the lock")

// queued is one order of a batch: its message, and for a SKU's batch its place in the Batcher's queue.
type queued struct {
	msg    *message.Message
	order  order.Order
	waited time.Duration  // from joining until its batch was taken
	q      *lockmw.Queued // nil: decided alone (a basket, a lifecycle event)
}

// take takes a batch of sku's waiting orders from the Batcher. A message that waited there undecoded (a
// chain without delivery.Decoder ahead of the Batcher) fails as bad input at once.
func (h *Handler) take(sku string, leader *message.Message) []*queued {
	var batch []*queued
	for _, q := range h.cfg.Batcher.Take(sku, inventory.MaxBatch) {
		o, ok := order.FromContext(q.Msg.Context())
		if !ok {
			err := fmt.Errorf("%w: message %s was not decoded", order.ErrBadInput, q.Msg.UUID)
			h.cfg.Batcher.Done(sku, leader, []*lockmw.Queued{q}, err)
			continue
		}
		batch = append(batch, &queued{msg: q.Msg, order: o, waited: q.Taken.Sub(q.Since), q: q})
	}
	return batch
}

// places are the Batcher's queue places of batch.
func places(batch []*queued) []*lockmw.Queued {
	qs := make([]*lockmw.Queued, len(batch))
	for i, p := range batch {
		qs[i] = p.q
	}
	return qs
}

// lead decides the batches of the leader msg's SKU in its section sec (nil: no lock, unfenced), oldest
// orders first, for at most leadFor (the first batch always runs: it holds the leader's own order, the
// oldest waiting), until one fails or finds the lock held; it returns the outcome of the leader's order. In
// an elided section a batch that finds the lock held goes back to the head of the queue (Batcher.PutBack)
// and ends the lead; if that was the first batch, lead returns lockmw.ErrLocked for the middleware to take
// the lock.
func (h *Handler) lead(msg *message.Message, sku string, sec *lockmw.Section) error {
	var fence int64
	switch {
	case sec == nil:
	case sec.Elided():
		fence = inventory.ElideLock
	default:
		fence = sec.Token(sku)
	}
	var own error
	done := false // the first batch, with the leader's order, was decided
	start := time.Now()
	for first := true; first || time.Since(start) < h.leadFor; first = false {
		batch, err := h.decideEach(msg, sku, fence)
		if len(batch) == 0 && first {
			return errNotQueued
		}
		if len(batch) == 0 {
			break
		}
		if errors.Is(err, errTakeLock) {
			h.cfg.Batcher.PutBack(sku, places(batch))
			if !done {
				own = err
			}
			break
		}
		if !done {
			done, own = true, err
		}
		if err != nil {
			break
		}
	}
	if !done {
		return fmt.Errorf("%w: %w", lockmw.ErrLocked, cmp.Or(own, errTakeLock))
	}
	return own
}

// decideEach decides a batch of sku's waiting orders (taken when the group commit's round starts, so that it
// holds every order of the SKU waiting by then) and hands each order its outcome. A batch that failed permanently
// (one order's corrupt record, say) or whose decision panicked (ErrPanicked: decideRound recovers) is decided
// again one order at a time, so that only the orders that fail on their own count the failure (a retry
// counts towards MAX_ATTEMPTS) and the others are decided.
func (h *Handler) decideEach(leader *message.Message, sku string, fence int64) ([]*queued, error) {
	c := &commit{ctx: leader.Context(), sku: sku, leader: leader, fence: fence}
	batch, err := h.committer.decide(c)
	switch oneByOne := len(batch) > 1 && (inventory.IsPermanent(err) || errors.Is(err, ErrPanicked)); {
	case len(batch) == 0:
		return nil, nil
	case errors.Is(err, lockmw.ErrLocked) || oneByOne && fence == inventory.ElideLock:
		// Decided nothing: the batch goes back to be decided under the lock, where a batch that fails
		// permanently is decided order by order (an elided order could meet the lock taken meanwhile).
		return batch, fmt.Errorf("%w: %w", errTakeLock, err)
	case !oneByOne:
		return batch, h.settle(sku, leader, batch, err, c.errs)
	}
	return batch, h.decideOneByOne(leader, sku, batch, fence)
}

// settle hands each order of batch its outcome (Batcher.Done): err, or with errs each order its own (a
// publish that failed for some orders only). It returns the leader's error when the batch holds the
// leader's order, else err.
func (h *Handler) settle(sku string, leader *message.Message, batch []*queued, err error, errs []error) error {
	if errs == nil {
		h.cfg.Batcher.Done(sku, leader, places(batch), err)
		return err
	}
	for i, p := range batch {
		h.cfg.Batcher.Done(sku, leader, places(batch[i:i+1]), errs[i])
		if p.msg == leader {
			err = errs[i]
		}
	}
	return err
}

// decideOneByOne decides each order of batch alone and returns the leader's outcome.
func (h *Handler) decideOneByOne(leader *message.Message, sku string, batch []*queued, fence int64) (err error) {
	for _, p := range batch {
		single := []*queued{p}
		_, perr := h.committer.decide(&commit{ctx: leader.Context(), batch: single, fence: fence})
		h.cfg.Batcher.Done(sku, leader, places(single), perr)
		if p.msg == leader {
			err = perr
		}
	}
	return err
}
