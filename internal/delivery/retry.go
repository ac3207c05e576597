package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/redisstream"
)

// Retrying here, when Redis cannot even take the entry back: exponential from retryMin, capped at retryMax.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 3 * time.Second
)

// retryDelay is how long a failed attempt waits, on average, before a consumer claims it again.
const retryDelay = time.Second

// replicaRetryDelay replaces retryDelay after too few replica acks (REPLICA_ACKS): a shard without a replica
// stays so until one is back, and each attempt holds a consumer for up to REPLICA_ACK_TIMEOUT, which the
// orders of the other shards need meanwhile.
const replicaRetryDelay = 5 * time.Second

// A failed attempt is one of:
//   - transient (Redis unreachable or busy, a lock wait over, a lost lease, a stale fence): the entry goes
//     back to the group as pending, to be claimed by any consumer after about retryDelay, and the delivery
//     does not count. The consumer moves on to other orders meanwhile. A stale fence first raises the
//     SKU's fencing counter to the stored fence, so a lost counter costs one retry.
//   - permanent (a corrupt stock hash, a key of the wrong type, a script error): handed back the same way
//     but counted; the MaxAttempts-th delivery sends it to the poison stream with the error as reason.
//
// An entry delivered more than MaxAttempts times (its workers died or froze before finishing each time: a
// graceful stop hands its entries back uncounted, and a handler that hangs in a live worker keeps its
// entry, whose idle time keepAlive resets) is poisoned before it runs (retry).

// failed decides on a failed attempt before it is handed back: a permanent failure on the last allowed
// delivery becomes a *permanentError, for the poison stream; a stale fence raises the lock's counter.
func (c *Consumer) failed(msg *message.Message, deliveries int, err error) error {
	if classify(err) == permanent && deliveries >= c.maxAttempts {
		return &permanentError{err: err, deliveries: deliveries}
	}
	c.recoverFence(msg.Context(), err)
	return nil
}

// handBack leaves the entry pending for a consumer to claim after a retry delay. It reports false when
// Redis could not be told.
func (c *Consumer) handBack(msg *message.Message, kind failureKind, deliveries int, err error) bool {
	wait := retryDelay
	if errors.Is(err, inventory.ErrReplicaAcks) || errors.Is(err, redisstream.ErrReplicaAcks) {
		wait = replicaRetryDelay
	}
	delay := min(wait*time.Duration(80+rand.IntN(41))/100, c.claimIdle/2)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), 2*time.Second)
	defer cancel()
	var uncount int64 // the count this delivery made, when it is taken off
	if kind == transient {
		uncount = redisstream.Deliveries(msg)
	}
	if herr := c.reclaim(ctx, c.partition(msg), redisstream.EntryID(msg), c.claimIdle-delay, uncount); herr != nil {
		c.logger.WarnContext(msg.Context(), "order failed, retrying here", "id", redisstream.EntryID(msg), "in", retryMin, "err", err, "hand_back_err", herr)
		return false
	}
	c.logger.WarnContext(msg.Context(), "order failed, handed back for a retry", "id", redisstream.EntryID(msg), "in", delay.String(),
		"failure", kind.String(), "attempt", deliveries, "err", err)
	retried.Add(ctx, 1, kind.attr())
	return true
}

// recoverFence raises the lock's fencing counter when the store refused a token below its stored fence.
// If the lock was merely taken over, the counter is already past the stored fence and nothing changes.
func (c *Consumer) recoverFence(ctx context.Context, err error) {
	var stale *inventory.StaleFenceError
	if c.tokens == nil || !errors.As(err, &stale) || stale.Current {
		return // with Current the counter is ahead already
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if rerr := c.tokens.RaiseToken(ctx, stale.SKU, stale.Stored); rerr != nil {
		c.logger.WarnContext(ctx, "could not raise the fencing counter to the stored fence", "sku", stale.SKU, "fence", stale.Stored, "err", rerr)
	}
}

// failureKind says whether retrying a failed attempt can help.
type failureKind int

const (
	transient failureKind = iota // outside the order: it passes by itself
	permanent                    // the order's data is broken: only an operator can mend it
)

func (k failureKind) String() string {
	if k == permanent {
		return "permanent"
	}
	return "transient"
}

func (k failureKind) attr() metric.MeasurementOption {
	if k == permanent {
		return failurePermanent
	}
	return failureTransient
}

// classify sorts an attempt's error: broken data (inventory.IsPermanent) and a decision that panicked
// (handlers.ErrPanicked) are permanent.
func classify(err error) failureKind {
	if inventory.IsPermanent(err) || errors.Is(err, handlers.ErrPanicked) {
		return permanent
	}
	return transient
}

// permanentError sends an entry to the poison stream: its attempt failed permanently on the last allowed
// delivery (err), or it was delivered more often than allowed without ever finishing (err nil).
type permanentError struct {
	err        error
	deliveries int
}

func (e *permanentError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("delivered %d times without an outcome: each time its worker died or froze before finishing", e.deliveries)
	}
	return fmt.Sprintf("failed permanently on attempt %d: %v", e.deliveries, e.err)
}

func (e *permanentError) Unwrap() error { return e.err }

func (e *permanentError) kind() metric.MeasurementOption {
	if e.err == nil {
		return reasonAttempts
	}
	return reasonFailed
}
