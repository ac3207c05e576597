package handlers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stream"
)

// publish sends the outcome events results of batch's orders (by the batch's order) to their partitions'
// results streams and acks their entries, in one MULTI/EXEC: a Redis that refuses the XADDs (OOM, say)
// must not run the XACK, or the entries would be acked without an outcome (a command refused while queued
// aborts the transaction). On a cluster a transaction cannot span slots: each partition's outcomes and
// acks go in a MULTI of their own.
//
// It returns nil when every order's outcome is published and its entry acked, else each order's error,
// by partition: nil for the orders of a partition whose commands all succeeded (on a cluster another
// partition's transaction can fail alone).
func (h *Handler) publish(ctx context.Context, batch []*queued, results []*message.Message) []error {
	pipes := []redis.Pipeliner{h.cfg.Redis.TxPipeline()}
	var sent []*outcomes
	for i, part := range h.byPartition(batch) {
		if i > 0 && h.cfg.Cluster {
			pipes = append(pipes, h.cfg.Redis.TxPipeline())
		}
		o, err := h.queueOutcomes(ctx, pipes[len(pipes)-1], part, results)
		sent = append(sent, o)
		if err != nil {
			endAll(sent)
			return slices.Repeat([]error{err}, len(batch))
		}
	}
	for _, pipe := range pipes {
		_, _ = pipe.Exec(ctx) // each command's error is read by end
	}
	var errs []error
	for _, o := range sent {
		err := o.end()
		if err == nil {
			continue
		}
		if errs == nil {
			errs = make([]error, len(batch))
		}
		err = fmt.Errorf("publish and ack the outcomes of %d orders in %s: %w", len(o.orders), o.Orders, err)
		for _, k := range o.orders {
			errs[k] = err
		}
	}
	return errs
}

// outcomes are the outcome events and the ack of one partition's orders, queued on a pipeline.
type outcomes struct {
	partitionBatch
	results stream.Batch
	ack     *redis.IntCmd
}

// queueOutcomes queues the outcome events (results, by the batch's order) of part's orders and their XACK
// on pipe.
func (h *Handler) queueOutcomes(ctx context.Context, pipe redis.Pipeliner, part partitionBatch, results []*message.Message) (*outcomes, error) {
	o := &outcomes{partitionBatch: part, results: stream.Batch{Topic: part.Results, MaxLen: h.cfg.ResultsMaxLen, Server: h.server}}
	ids := make([]string, len(part.orders))
	for i, k := range part.orders {
		if err := o.results.Add(pipe, results[k]); err != nil {
			return o, err
		}
		ids[i] = part.batch[k].msg.UUID
	}
	o.ack = pipe.XAck(ctx, part.Orders, h.cfg.Group, ids...)
	return o, nil
}

// end ends the outcome events' spans and returns the first error of their XADDs and XACK.
func (o *outcomes) end() error {
	err := o.results.End()
	if o.ack != nil {
		err = cmp.Or(err, o.ack.Err())
	}
	return err
}

// endAll ends the spans of sent's outcome events.
func endAll(sent []*outcomes) {
	for _, o := range sent {
		_ = o.end()
	}
}

// partitionBatch is the orders of a batch read from one partition (normally all of them: a SKU's orders
// go to one partition, unless a producer routed one elsewhere), by their index in the batch.
type partitionBatch struct {
	stream.Partition
	batch  []*queued
	orders []int
}

// byPartition splits batch by the partition each order was read from, in the order they first appear.
func (h *Handler) byPartition(batch []*queued) []partitionBatch {
	var parts []partitionBatch
	for i, q := range batch {
		part := h.cfg.Partitions[stream.EntryPartition(q.msg)]
		j := slices.IndexFunc(parts, func(b partitionBatch) bool { return b.Index == part.Index })
		if j < 0 {
			parts, j = append(parts, partitionBatch{Partition: part, batch: batch}), len(parts)
		}
		parts[j].orders = append(parts[j].orders, i)
	}
	return parts
}
