package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
)

// Retrying here, when Redis cannot even take the entry back: exponential from retryMin, capped at retryMax.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 3 * time.Second
)

// retryDelay is how long a failed attempt waits, on average, before a consumer claims it again.
const retryDelay = time.Second

// attempts runs the handler once per delivery and decides what a failure means:
//   - transient (Redis unreachable or busy, a lock wait over, a lost lease, a stale fence): the entry goes
//     back to the group as pending, to be claimed by any consumer after about retryDelay, and the delivery
//     does not count. The consumer moves on to other orders meanwhile. A stale fence first raises the
//     SKU's fencing counter to the stored fence, so a lost counter costs one retry.
//   - permanent (a corrupt stock hash, a key of the wrong type, a script error): handed back the same way
//     but counted; the MaxAttempts-th delivery sends it to the poison stream with the error as reason.
//
// An entry delivered more than MaxAttempts times (its workers died or hung each time) is poisoned before
// it runs. When Redis cannot take the entry back, the handler is retried here with backoff, as long as
// the message context lives.
type attempts struct {
	s         stream
	max       int
	claimIdle time.Duration
	logger    *slog.Logger
	// raiseToken raises the fencing counter of a lock key; nil when the locker has none.
	raiseToken func(ctx context.Context, key string, token int64) error
}

func (a attempts) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		deliveries := max(deliveriesOf(msg), 1)
		if deliveries > a.max {
			return nil, &permanentError{deliveries: deliveries - 1}
		}
		for backoff := retryMin; ; backoff = min(2*backoff, retryMax) {
			msgs, err := h(msg)
			if err == nil || errors.Is(err, handlers.ErrBadInput) {
				return msgs, err
			}
			kind := classify(err)
			if kind == permanent && deliveries >= a.max {
				return nil, &permanentError{err: err, deliveries: deliveries}
			}
			a.recoverFence(msg.Context(), err)
			if a.handBack(msg, kind, deliveries, err) {
				return nil, nil
			}
			select {
			case <-msg.Context().Done():
				return nil, errors.Join(err, context.Cause(msg.Context()))
			case <-time.After(backoff):
			}
		}
	}
}

// handBack leaves the entry pending for a consumer to claim after a retry delay. It reports false when
// Redis could not be told.
func (a attempts) handBack(msg *message.Message, kind failureKind, deliveries int, err error) bool {
	delay := min(retryDelay*time.Duration(80+rand.IntN(41))/100, a.claimIdle/2)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), 2*time.Second)
	defer cancel()
	if herr := a.s.reclaim(ctx, msg.UUID, a.claimIdle-delay, kind == transient); herr != nil {
		a.logger.Warn("order failed, retrying here", "id", msg.UUID, "in", retryMin, "err", err, "hand_back_err", herr)
		return false
	}
	a.logger.Warn("order failed, handed back for a retry", "id", msg.UUID, "in", delay.String(),
		"failure", kind.String(), "attempt", deliveries, "err", err)
	retried.Add(ctx, 1, kind.attr())
	return true
}

// recoverFence raises the lock's fencing counter when the store refused a token below its stored fence.
// If the lock was merely taken over, the counter is already past the stored fence and nothing changes.
func (a attempts) recoverFence(ctx context.Context, err error) {
	var stale *inventory.StaleFenceError
	if a.raiseToken == nil || !errors.As(err, &stale) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if rerr := a.raiseToken(ctx, stale.SKU, stale.Stored); rerr != nil {
		a.logger.Warn("could not raise the fencing counter to the stored fence", "sku", stale.SKU, "fence", stale.Stored, "err", rerr)
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

// classify sorts an attempt's error. Only what is known to be broken data is permanent; anything else,
// known or not, is retried without counting, so an infrastructure fault never poisons a valid order.
func classify(err error) failureKind {
	if errors.Is(err, inventory.ErrCorrupt) || errors.Is(err, inventory.ErrInvalid) {
		return permanent
	}
	var reply redis.Error
	if errors.As(err, &reply) && !errors.Is(err, redis.Nil) {
		// WRONGTYPE: a SKU key holds another type. "ERR user_script:": a script failed at run time on the
		// data it found (a corrupt outcome record, say). A command refused inside a script keeps its own
		// code (OOM, READONLY, NOREPLICAS ... "script: <sha>, on @user_script:1."): those stay transient.
		msg := reply.Error()
		if strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "ERR user_script:") {
			return permanent
		}
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
		return fmt.Sprintf("delivered %d times without an outcome: each time its worker crashed, hung or was stopped before finishing", e.deliveries)
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
