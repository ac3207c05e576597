package handlers

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// publish sends the outcome events results of batch's orders (by the batch's order) to their partitions'
// results streams: one script call per partition (redisstream.Commit: one slot on a cluster), all in one
// pipeline, each writing nothing unless its checks pass. The entries are acked afterwards, when the router
// acks the orders' messages: never before their outcomes are in Redis. An order whose entry is no longer
// pending to this consumer (claimed by another while this round stalled) gets no event from this round, and
// ErrClaimed: the claimer settles it, this round's outcome could contradict what was published since, and
// an ack of the entry would take it from the claimer.
//
// It returns nil when every order's outcome is published, else each order's error: ErrClaimed for those
// claimed meanwhile, and by partition the error of a call that failed (on a cluster another partition's can
// fail alone).
func (h *Handler) publish(ctx context.Context, batch []*queued, results []*message.Message) []error {
	errs, noScript := h.commit(ctx, batch, results)
	if noScript { // Redis restarted, or a node never ran it: the calls wrote nothing
		if err := redisstream.CommitScript.Load(ctx, h.cfg.Redis).Err(); err != nil {
			return slices.Repeat([]error{err}, len(batch))
		}
		errs, _ = h.commit(ctx, batch, results)
	}
	return errs
}

// commit makes publish's calls once; noScript reports a NOSCRIPT answer.
func (h *Handler) commit(ctx context.Context, batch []*queued, results []*message.Message) (errs []error, noScript bool) {
	pipe := h.cfg.Redis.Pipeline()
	parts := h.byPartition(batch)
	commits := make([]*redisstream.Commit, len(parts))
	for i, part := range parts {
		commits[i] = &redisstream.Commit{Orders: part.Orders, Results: part.Results, Group: h.cfg.Group,
			Consumer: h.consumer(), MaxLen: h.cfg.ResultsMaxLen, Server: h.server}
		for _, k := range part.orders {
			if err := commits[i].Add(redisstream.EntryID(part.batch[k].msg), results[k]); err != nil {
				return slices.Repeat([]error{err}, len(batch)), false
			}
		}
		commits[i].Queue(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx) // each call's error is read by End
	for i, part := range parts {
		owned, err := commits[i].End()
		noScript = noScript || redis.HasErrorPrefix(err, "NOSCRIPT")
		h.noteClaimed(part, owned)
		if err != nil {
			err = fmt.Errorf("publish the outcomes of %d orders in %s: %w", len(part.orders), part.Orders, err)
		}
		for j, k := range part.orders {
			if e := cmp.Or(err, claimed(owned, j)); e != nil {
				if errs == nil {
					errs = make([]error, len(batch))
				}
				errs[k] = e
			}
		}
	}
	return errs, noScript
}

// noteClaimed logs the orders of part that another consumer claimed before this round could settle them.
func (h *Handler) noteClaimed(part partitionBatch, owned []bool) {
	for i, own := range owned {
		if !own {
			q := part.batch[part.orders[i]]
			cmp.Or(h.cfg.Logger, slog.Default()).WarnContext(q.msg.Context(), "outcome not published: the entry was claimed by another consumer while this round stalled",
				"order_id", q.order.OrderID, "entry", redisstream.EntryID(q.msg), "stream", part.Orders)
		}
	}
}

// ErrClaimed fails the orders of a round whose entries another consumer claimed before the round could
// publish their outcomes (this worker stalled past CLAIM_IDLE): the claimer settles them. Their messages are
// nacked, not acked (redisstream.ErrLeftPending): an ack would take the entry from the claimer, which would then
// publish nothing for it.
var ErrClaimed = fmt.Errorf("handlers: the entry was claimed by another consumer meanwhile: %w", redisstream.ErrLeftPending)

// claimed is ErrClaimed when the j-th order of a commit was not owned, else nil.
func claimed(owned []bool, j int) error {
	if j < len(owned) && !owned[j] {
		return ErrClaimed
	}
	return nil
}

// consumer is the name this worker reads under in the group.
func (h *Handler) consumer() string { return cmp.Or(h.cfg.Consumer, h.cfg.Worker) }

// partitionBatch is the orders of a batch read from one partition (normally all of them: a SKU's orders
// go to one partition, unless a producer routed one elsewhere), by their index in the batch.
type partitionBatch struct {
	order.Partition
	batch  []*queued
	orders []int
}

// byPartition splits batch by the partition each order was read from, in the order they first appear.
func (h *Handler) byPartition(batch []*queued) []partitionBatch {
	var parts []partitionBatch
	for i, q := range batch {
		part := h.cfg.Partitions[redisstream.EntryPartition(q.msg)]
		j := slices.IndexFunc(parts, func(b partitionBatch) bool { return b.Index == part.Index })
		if j < 0 {
			parts, j = append(parts, partitionBatch{Partition: part, batch: batch}), len(parts)
		}
		parts[j].orders = append(parts[j].orders, i)
	}
	return parts
}
