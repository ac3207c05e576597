package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/redisstream"
)

// The batches that the SKUs' leaders in this process want decided at one moment are decided together
// (group commit): their stock script calls go in one pipeline, then the outcome events of all their orders
// in one pipeline of commit calls, one per partition (publish); the Router acks their messages after. Flat combining once more: the first
// leader to arrive commits a round; the leaders that arrive meanwhile wait and go into the next round
// together, committed by the first of them once the round before is done. So a worker whose consumers hold
// the orders of 50 SKUs decides them in two round trips rather than a hundred, and one leader alone
// commits at once, without waiting for company. A basket is reserved in a round too (on one Redis: its
// script in the round's pipeline, reserveBasket); a lifecycle event, or a basket on a cluster, decided
// alone (its own script or saga), joins a round the same way for its outcome event.
//
// Every batch gets the outcome it would get alone: the scripts are separate calls (each atomic), and a
// batch whose script fails fails alone. A failed transaction fails the batches with an order in it (all of
// the round on one Redis, a partition's on a cluster), which are retried and decide again the same way
// (their reservations are recorded per order).

// committer queues the batches waiting for a round.
type committer struct {
	mu      sync.Mutex
	waiting []*commit
	running bool // a round is being committed
	// h commits the batches of a round (Handler.decideRound), each commit getting its outcome; its Batcher
	// holds the queues the SKUs' batches are taken from.
	h *Handler
}

// commit is one batch in a round: its orders, oldest first, and the fence they are decided under; or an
// order decided already (a basket, a lifecycle event: decided), whose outcome event only joins the round's
// commit.
type commit struct {
	ctx context.Context // the batch leader's
	// sku: the batch is the SKU's waiting orders, taken from the Batcher once, when the round starts
	// (orders), for leader, the message that leads the SKU; "": the batch is given.
	sku     string
	leader  *message.Message
	taken   bool
	batch   []*queued
	fence   int64
	decided bool               // decided already (publish): not reserved by the round
	basket  *inventory.Basket  // a basket, the round reserves it (reserveBasket): batch is its one order
	results []*message.Message // the outcome events: given (decided), or of the round's reservation
	err     error
	// errs is each order's error when the round's publish failed for some of its orders only (ErrClaimed
	// for an entry another consumer claimed meanwhile); nil: err is every order's.
	errs []error
	// wake is what a batch that waits for its round (another leader commits) is told, once: false, its
	// round is done (err is set); true, its leader commits the next round. nil for one that commits.
	wake chan bool
}

// orders takes b's batch the first time: from its SKU's queue in the Batcher (take), a given one as it is.
func (h *Handler) orders(b *commit) []*queued {
	if !b.taken {
		b.taken = true
		if b.sku != "" {
			b.batch = h.take(b.sku, b.leader)
		}
	}
	return b.batch
}

// publish publishes the outcome events of orders decided already in the next round's commit.
func (c *committer) publish(ctx context.Context, batch []*queued, results []*message.Message) error {
	_, err := c.decide(&commit{ctx: ctx, batch: batch, decided: true, results: results})
	return err
}

// reserveBasket reserves basket, the order of q, in the next round, and publishes its outcome event in that
// round's commit.
func (c *committer) reserveBasket(ctx context.Context, q *queued, basket *inventory.Basket) error {
	_, err := c.decide(&commit{ctx: ctx, batch: []*queued{q}, basket: basket})
	return err
}

// decide queues b for the next round and returns b's batch and outcome once its round is done. When no
// round is running, or b's leader is asked to lead the next one, it commits the waiting batches, round after
// round, until b's round is done; then the oldest batch still waiting (if any) leads the next round.
func (c *committer) decide(b *commit) ([]*queued, error) {
	c.mu.Lock()
	c.waiting = append(c.waiting, b)
	leads := !c.running
	c.running = true
	if !leads {
		b.wake = make(chan bool, 1)
	}
	c.mu.Unlock()
	if !leads && !<-b.wake {
		return b.batch, b.err
	}
	for {
		c.mu.Lock()
		round := c.waiting
		c.waiting = nil
		c.mu.Unlock()
		// Not cancellable: the leader's context ends when its lease is lost (a basket's, when any of its
		// leases is), which is its own batch's concern (fencing refuses a stale write), not the round's.
		c.h.decideRound(context.WithoutCancel(b.ctx), round)
		for _, w := range round {
			if w.wake != nil {
				w.wake <- false
			}
		}
		if slices.Contains(round, b) { // else b came after this round was taken: it is in the next
			c.handOn()
			return b.batch, b.err
		}
	}
}

// handOn makes the oldest waiting batch's leader commit the next round, or ends the running.
func (c *committer) handOn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.running = false
		return
	}
	c.waiting[0].wake <- true
}

// decideRound reserves the batches of a round in one pipeline (Store.ReserveBatches), then publishes the
// outcome events of every batch that succeeded, and of the orders decided already, in one pipeline of
// commit calls (publish). Should it panic, each of its batches is decided again alone (recoverRound).
func (h *Handler) decideRound(ctx context.Context, round []*commit) {
	defer h.recoverRound(ctx, round)
	round = slices.DeleteFunc(slices.Clone(round), func(b *commit) bool { return len(h.orders(b)) == 0 })
	toReserve := slices.DeleteFunc(slices.Clone(round), func(b *commit) bool { return b.decided })
	var reserved []inventory.BatchResult
	if len(toReserve) > 0 {
		batches := make([]inventory.Batch, len(toReserve))
		for i, b := range toReserve {
			if b.basket != nil {
				batches[i] = inventory.Batch{Ctx: b.ctx, Basket: b.basket}
			} else {
				batches[i] = inventory.Batch{Ctx: b.ctx, Orders: storeOrders(b.batch), Fence: b.fence}
			}
		}
		reserved = h.cfg.Store.ReserveBatches(ctx, batches)
	}
	var (
		decided []*commit
		orders  []*queued
		results []*message.Message
	)
	for i, b := range toReserve {
		if b.err = reserved[i].Err; b.err != nil {
			b.err = fmt.Errorf("reserve %s: %w", orderIDs(b.batch), asHandlerError(b.err))
			continue
		}
		if b.basket != nil {
			q := b.batch[0]
			var result *message.Message
			result, b.err = h.resultMessage(q.msg.Context(), newOrderResult(q.order, reserved[i].Order, h.cfg.Worker, q.waited))
			b.results = []*message.Message{result}
			continue
		}
		b.results, b.err = h.resultMessages(b.batch, reserved[i].Outcomes)
	}
	for _, b := range round {
		if b.err == nil && b.results != nil {
			decided, orders, results = append(decided, b), append(orders, b.batch...), append(results, b.results...)
		}
	}
	if len(decided) == 0 {
		return
	}
	errs := h.publish(ctx, orders, results)
	if errs == nil {
		return
	}
	for _, b := range decided { // a batch fails when any of its orders did, each order with its own error
		b.errs = errs[:len(b.batch)]
		b.err = cmp.Or(b.errs...)
		errs = errs[len(b.batch):]
	}
}

// recoverRound, deferred by decideRound, recovers a panic of round's decision: each of its batches is
// decided again alone (a batch's orders are taken once), so that only the batch whose data panics gets
// ErrPanicked, which counts towards MAX_ATTEMPTS.
func (h *Handler) recoverRound(ctx context.Context, round []*commit) {
	v := recover()
	if v == nil {
		return
	}
	if len(round) == 1 {
		round[0].err = fmt.Errorf("%w: %v", ErrPanicked, v)
		return
	}
	for _, b := range round {
		h.decideRound(ctx, []*commit{b})
	}
}

// storeOrders are the store's orders of batch.
func storeOrders(batch []*queued) []inventory.Order {
	orders := make([]inventory.Order, len(batch))
	for i, q := range batch {
		orders[i] = inventory.Order{ID: q.order.OrderID, SKU: q.order.SKU, Quantity: q.order.Quantity}
	}
	return orders
}

// resultMessages are the outcome events of batch's orders, decided as outs.
func (h *Handler) resultMessages(batch []*queued, outs []inventory.Outcome) ([]*message.Message, error) {
	msgs := make([]*message.Message, len(batch))
	for i, out := range outs {
		var err error
		if msgs[i], err = h.resultMessage(batch[i].msg.Context(), newResult(out, h.cfg.Worker, batch[i].waited)); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// publish sends the outcome events results of batch's orders (by the batch's order) to the results topic
// through Config.Outcomes, each the answer to its order's entry (redisstream.Answer): the Pub/Sub's
// publisher writes an answer only while its entry is still pending to this consumer, one script call per
// partition, all in one round trip. The entries are acked afterwards, when the Router acks the orders'
// messages: never before their outcomes are in Redis. An order whose entry is no longer pending to this
// consumer (claimed by another while this round stalled) gets no event from this round, and ErrClaimed: the
// claimer settles it, this round's outcome could contradict what was published since, and an ack of the
// entry would take it from the claimer.
//
// It returns nil when every order's outcome is published, else each order's error: ErrClaimed for those
// claimed meanwhile, and the error of a call that failed (on a cluster another partition's can fail alone).
func (h *Handler) publish(ctx context.Context, batch []*queued, results []*message.Message) []error {
	for i, q := range batch {
		redisstream.Answer(results[i], q.msg)
	}
	// Publish runs under its first message's context: not cancellable, as the round (the order's context
	// ends when its lease is lost, which fencing deals with).
	results[0].SetContext(context.WithoutCancel(results[0].Context()))
	err := h.cfg.Outcomes.Publish(h.cfg.ResultsTopic, results...)
	if err == nil {
		return nil
	}
	var each redisstream.PublishErrors
	if !errors.As(err, &each) || len(each) != len(batch) {
		each = nil
	}
	errs := make([]error, len(batch))
	for i, q := range batch {
		e := err
		if each != nil {
			e = each[i]
		}
		if errors.Is(e, redisstream.ErrNotPending) {
			cmp.Or(h.cfg.Logger, slog.Default()).WarnContext(ctx, "outcome not published: the entry was claimed by another consumer while this round stalled",
				"order_id", q.order.OrderID, "entry", redisstream.EntryID(q.msg), "stream", redisstream.Stream(q.msg))
			e = ErrClaimed
		} else if e != nil {
			e = fmt.Errorf("publish the outcome of order %s: %w", q.order.OrderID, e)
		}
		errs[i] = e
	}
	return errs
}

// ErrClaimed fails the orders of a round whose entries another consumer claimed before the round could
// publish their outcomes (this worker stalled past CLAIM_IDLE): the claimer settles them. Their messages are
// nacked, not acked (redisstream.ErrLeftPending): an ack would take the entry from the claimer, which would then
// publish nothing for it.
var ErrClaimed = fmt.Errorf("handlers: the entry was claimed by another consumer meanwhile: %w", redisstream.ErrLeftPending)
