// Package delivery is what happens to a stream entry around its handler, at least once: the steps of a
// consumer's chain, outermost first, each a message.HandlerMiddleware:
//
//	trace ▶ poison ▶ Recoverer (Watermill's) ▶ retry ▶ keepAlive ▶ Decoder ▶ (the lock: lockmw) ▶ (the handler)
//
// trace continues the producer's trace; poison sends what can never succeed to the poison stream and acks it;
// Watermill's Recoverer turns a panic into an error, which poison poisons (a message that panics once would
// panic again); retry hands a failed attempt back to the group (retry.go: which
// failures count); keepAlive keeps an entry being handled from being claimed by another worker; Decoder
// makes the message an order (decode.go), which a bad payload fails as bad input (poisoned). (An order
// in flight finishes on shutdown because its message's context outlives the subscription:
// redisstream.SubscriberConfig.HandlingContext.)
//
// Watermill's Retry and PoisonQueue middlewares are not used, and watermill_test.go shows what each would get
// wrong here: Retry retries inside one delivery, so Redis never counts the attempts (MAX_ATTEMPTS could not
// stop a message that crashes its worker, and the consumer's place is held while it waits); PoisonQueue
// publishes the message and leaves the ack to the Router, two steps, with the message's payload and metadata
// only, where poisoning must add the entry's own fields to the poison stream and ack it in one transaction.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// Config is one consumer's.
type Config struct {
	Redis        redis.UniversalClient // acks, poison, hand-backs
	Partitions   []order.Partition     // the streams it reads
	Group, Name  string                // its consumer group and its name in it
	PoisonMaxLen int                   // approximate bound of the poison streams
	MaxAttempts  int                   // deliveries of an entry before it is poisoned (MAX_ATTEMPTS)
	ClaimIdle    time.Duration         // CLAIM_IDLE
	Logger       *slog.Logger
	// Tokens raises the fencing counter of a lock key (rlock.Reentrant and rlock.Redlock do); nil when the
	// locker has none.
	Tokens TokenRaiser
}

// TokenRaiser raises the fencing counter of a lock key to at least token.
type TokenRaiser interface {
	RaiseToken(ctx context.Context, key string, token int64) error
}

// New returns the consumer of cfg.
func New(cfg Config) *Consumer {
	c := &Consumer{rdb: cfg.Redis, parts: cfg.Partitions,
		group: cfg.Group, name: cfg.Name, poisonMaxLen: cfg.PoisonMaxLen, maxAttempts: cfg.MaxAttempts,
		claimIdle: cfg.ClaimIdle, logger: cfg.Logger, tokens: cfg.Tokens,
		handling: make(map[*message.Message]time.Time), live: make(map[*message.Message]*liveEntry)}
	server := redisstream.ServerAttributes(cfg.Redis)
	for _, p := range cfg.Partitions {
		c.spans = append(c.spans, redisstream.Consumer{Stream: p.Orders, Group: cfg.Group, Name: cfg.Name, Server: server}.Spans())
	}
	return c
}

// Name is the consumer's name in its group.
func (c *Consumer) Name() string { return c.name }

// Consumer is one consumer of the group: the one a message was delivered to, and its chain.
type Consumer struct {
	rdb          redis.UniversalClient
	parts        []order.Partition          // the streams it reads
	spans        []redisstream.ProcessSpans // the consumer spans of each partition's messages
	group        string
	name         string
	poisonMaxLen int
	maxAttempts  int
	claimIdle    time.Duration
	logger       *slog.Logger
	tokens       TokenRaiser // nil when the locker has none

	mu        sync.Mutex
	handling  map[*message.Message]time.Time  // the messages being handled, and since when
	live      map[*message.Message]*liveEntry // the entries being handled, kept from going idle (keepAlive)
	resetting bool                            // resetIdle runs
}

// Longest is how long the message handled longest has been handled so far; 0 when none is.
func (c *Consumer) Longest() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var longest time.Duration
	for _, since := range c.handling {
		longest = max(longest, time.Since(since))
	}
	return longest
}

// handle notes that msg is being handled, until handled.
func (c *Consumer) handle(msg *message.Message) {
	c.mu.Lock()
	c.handling[msg] = time.Now()
	c.mu.Unlock()
}

func (c *Consumer) handled(msg *message.Message) {
	c.mu.Lock()
	delete(c.handling, msg)
	c.mu.Unlock()
}

// partition is the partition msg's entry was read from.
func (c *Consumer) partition(msg *message.Message) order.Partition {
	return c.parts[redisstream.EntryPartition(msg)]
}

// Steps are the consumer's delivery steps, outermost first, for the Router's handler
// (message.Handler.AddMiddleware): trace, poison, Watermill's Recoverer, retry, keep alive.
func (c *Consumer) Steps() []message.HandlerMiddleware {
	return []message.HandlerMiddleware{c.trace, c.poison, middleware.Recoverer, c.retry, c.keepAlive}
}

// trace continues the trace the message carries (W3C traceparent in its metadata, set by the producer)
// with a consumer span around the whole handling, and counts the messages in flight.
func (c *Consumer) trace(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		growStack()
		orig := msg.Context()
		ctx, span := c.spans[redisstream.EntryPartition(msg)].Start(orig, msg)
		inFlight.Add(ctx, 1)
		c.handle(msg)
		defer func() {
			c.handled(msg)
			inFlight.Add(ctx, -1)
			span.End()
			msg.SetContext(orig)
		}()
		msg.SetContext(ctx)
		msgs, err := h(msg)
		if err != nil && !errors.Is(err, redisstream.ErrLeftPending) { // a hand-back is logged and counted (retry)
			redisstream.Fail(span, err)
		}
		return msgs, err
	}
}

// poison sends a message that can never succeed to the poison stream and acks it, in one MULTI: an entry
// marked unreadable by the unmarshaller, one the handler rejects as bad input, one whose handling panicked,
// and one that failed permanently or too often (retry). The poison entry holds the original fields, plus
// poison_reason, poison_source_stream and poison_source_id. Anything else passes through.
func (c *Consumer) poison(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		reason, kind := msg.Metadata.Get(redisstream.UnmarshalError), reasonBadInput
		if reason == "" {
			msgs, err := h(msg)
			if reason, kind = poisonReason(err); reason == "" {
				return msgs, err
			}
			var panicked middleware.RecoveredPanicError
			if errors.As(err, &panicked) {
				c.logger.ErrorContext(msg.Context(), "handler panicked", "id", redisstream.EntryID(msg), "panic", panicked.V,
					"stack", panicked.Stacktrace)
			}
		}
		reason = truncate(reason, maxReason)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), 5*time.Second)
		defer cancel()
		p := c.partition(msg)
		id := redisstream.EntryID(msg)
		if err := c.toPoison(ctx, p, id, reason); err != nil {
			return nil, fmt.Errorf("poison entry %s: %w", id, err)
		}
		c.logger.WarnContext(msg.Context(), "poisoned entry", "stream", p.Orders, "id", id, "reason", reason)
		redisstream.Poisoned.Add(ctx, 1, kind)
		trace.SpanFromContext(msg.Context()).AddEvent("poisoned", trace.WithAttributes(attribute.String("reason", reason)))
		return nil, nil
	}
}

// ErrHandedBack is what a failed attempt handed back to the group returns (retry): the router nacks its
// message, and the entry, pending, is claimed about a second later.
var ErrHandedBack = fmt.Errorf("delivery: handed back for a retry: %w", redisstream.ErrLeftPending)

// retry runs the handler once per delivery and hands a failed attempt back to the group (see retry.go:
// which failures count, and MaxAttempts). When Redis cannot take the entry back, the handler is retried
// here with backoff, as long as the message context lives.
func (c *Consumer) retry(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		deliveries := max(int(redisstream.Deliveries(msg)), 1)
		if deliveries > c.maxAttempts {
			return nil, &permanentError{deliveries: deliveries - 1}
		}
		for backoff := retryMin; ; backoff = min(2*backoff, retryMax) {
			msgs, err := h(msg)
			if err == nil || errors.Is(err, order.ErrBadInput) || errors.Is(err, redisstream.ErrLeftPending) {
				return msgs, err // ErrLeftPending: claimed by another consumer, whose to settle
			}
			if err := c.failed(msg, deliveries, err); err != nil {
				return nil, err
			}
			if c.handBack(msg, classify(err), deliveries, err) {
				return nil, ErrHandedBack // the router nacks it: no ack takes the entry from the group
			}
			if err := sleep(msg.Context(), backoff, err); err != nil {
				return nil, err
			}
		}
	}
}

// sleep waits d, or fails with err and the cause once ctx is done.
func sleep(ctx context.Context, d time.Duration, err error) error {
	select {
	case <-ctx.Done():
		return errors.Join(err, context.Cause(ctx))
	case <-time.After(d):
		return nil
	}
}

// keepAlive keeps the entry from going idle in Redis while it is handled, so a slow order (waiting for a
// hot lock) is not claimed by another worker: one loop per consumer (resetIdle) resets, in one pipeline,
// the idle time of every entry not reset for half a tick (a twelfth of the claim idle time), every sixth of
// it, so that an
// entry being handled is never idle for much more than a quarter of it (HandBackPending counts on under a
// half). It returns only once a reset of its entry under way is done: a reset after the attempt was handed
// back would delay the retry by a whole claim idle time. The resets read what they need of the message
// before the handler runs: the steps after it replace the message's context as they go
// (Message.SetContext is not safe to race with Message.Context).
func (c *Consumer) keepAlive(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		c.keep(msg)
		defer c.release(msg)
		return h(msg)
	}
}

// liveEntry is an entry being handled, whose idle time resetIdle resets.
type liveEntry struct {
	part  order.Partition
	id    string
	last  time.Time     // when it started, or was last taken into a reset round
	round chan struct{} // closed when the last reset round that took it ends; nil: none took it
}

// keep adds msg's entry to those whose idle time is reset, and starts the loop that resets them when it
// is not running.
func (c *Consumer) keep(msg *message.Message) {
	e := &liveEntry{part: c.partition(msg), id: redisstream.EntryID(msg), last: time.Now()}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[msg] = e
	if !c.resetting {
		c.resetting = true
		go c.resetIdle()
	}
}

// release takes msg's entry out of those whose idle time is reset, once a reset of it under way is done.
func (c *Consumer) release(msg *message.Message) {
	c.mu.Lock()
	round := c.live[msg].round
	delete(c.live, msg)
	c.mu.Unlock()
	if round != nil {
		<-round
	}
}

// resetIdle resets, every sixth of the claim idle time, the idle time of the entries not reset for that
// long (their first half of it); it ends when no entry is being handled.
func (c *Consumer) resetIdle() {
	every := c.claimIdle / 6
	tick := time.NewTicker(every)
	defer tick.Stop()
	for range tick.C {
		due, round, ok := c.dueForReset(every / 2)
		if !ok {
			return
		}
		c.resetRound(due)
		close(round)
	}
}

// resetRound resets the idle time of due's entries in one pipeline, within a third of the claim idle time
// (a cluster node that does not answer holds up the round no longer).
func (c *Consumer) resetRound(due []*liveEntry) {
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.claimIdle/3)
	defer cancel()
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(due))
	for i, e := range due {
		cmds[i] = reclaimScript.EvalSha(ctx, pipe, []string{e.part.Orders}, c.group, c.name, e.id, 0, 0)
	}
	_, _ = pipe.Exec(ctx) // a reset that fails is tried again next round
	for i, e := range due {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = c.reclaim(ctx, e.part, e.id, 0, 0)
		}
	}
}

// dueForReset takes the entries not reset for at least after into a new reset round; false, and the loop
// is over, when none is being handled.
func (c *Consumer) dueForReset(after time.Duration) (due []*liveEntry, round chan struct{}, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.live) == 0 {
		c.resetting = false
		return nil, nil, false
	}
	round = make(chan struct{})
	now := time.Now()
	for _, e := range c.live {
		if now.Sub(e.last) >= after {
			e.last, e.round, due = now, round, append(due, e)
		}
	}
	return due, round, true
}

// growStack grows the stack of the goroutine the Router starts for each message, at once, while it is
// shallow: otherwise it grows by doublings deep in the chain, each copy adjusting every frame above it (in a
// drain profile, 7-18 % of a worker's CPU went to copying stacks). Same-run cost bench, 5 rounds: worker CPU
// per order 57.5 against 63.5 µs uniform, 58.0 against 67.5 hot.
//
//go:noinline
func growStack() {
	var pad [stackPad]byte
	touch(pad[:])
}

// stackPad is about what a message's goroutine needs below the Router, the decoder's and a waiting
// follower's depth; a commit round's leader, deeper in go-redis, may grow once more. A larger pad costs
// more to clear (8 KiB measured no better).
const stackPad = 4 << 10

// touch keeps pad from being optimised away.
//
//go:noinline
func touch(b []byte) { b[len(b)-1] = 1 }
