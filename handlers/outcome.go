package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/redisstream"
)

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
