package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/handlers"
)

// The per-message chain, outermost first (see Worker.chain):
//
//	trace ▶ poison ▶ recover ▶ drain ▶ attempts ▶ keepalive ▶ decode ▶ ack ▶ lock ▶ reserve + publish outcome

// stream identifies the consumer a message was delivered to.
type stream struct {
	rdb          redis.UniversalClient
	name         string
	group        string
	consumer     string
	poison       string
	poisonMaxLen int
	busy         *atomic.Int64 // since when the consumer has been handling its message (unix ns), 0 when idle
}

// poison sends a message that can never succeed to the poison stream and acks it, in one MULTI: an entry
// marked unreadable by the unmarshaller, one the handler rejects as bad input, one whose handling panicked,
// and one that failed permanently or too often (attempts). The poison entry holds the original fields,
// plus poison_reason, poison_source_stream and poison_source_id. Anything else passes through.
func (s stream) poisonMiddleware(logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			reason, kind := msg.Metadata.Get(metaBadEntry), reasonBadInput
			if reason == "" {
				msgs, err := h(msg)
				if reason, kind = poisonReason(err); reason == "" {
					return msgs, err
				}
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), 5*time.Second)
			defer cancel()
			if err := s.toPoison(ctx, msg.UUID, reason); err != nil {
				return nil, fmt.Errorf("poison entry %s: %w", msg.UUID, err)
			}
			logger.Warn("poisoned entry", "stream", s.name, "id", msg.UUID, "reason", reason)
			poisoned.Add(ctx, 1, kind)
			trace.SpanFromContext(msg.Context()).AddEvent("poisoned", trace.WithAttributes(attribute.String("reason", reason)))
			return nil, nil
		}
	}
}

// poisonReason says why err sends its message to the poison stream, or "" when it does not.
func poisonReason(err error) (string, metric.MeasurementOption) {
	var panicked *panicError
	var failed *permanentError
	switch {
	case errors.As(err, &panicked):
		return panicked.Error(), reasonPanic
	case errors.As(err, &failed):
		return failed.Error(), failed.kind()
	case errors.Is(err, handlers.ErrBadInput):
		return err.Error(), reasonBadInput
	}
	return "", nil
}

func (s stream) toPoison(ctx context.Context, id, reason string) error {
	fields := map[string]any{}
	entries, err := s.rdb.XRange(ctx, s.name, id, id).Result()
	if err != nil {
		return err
	}
	for _, e := range entries {
		for k, v := range e.Values {
			fields[k] = v
		}
	}
	fields["poison_reason"] = reason
	fields["poison_source_stream"] = s.name
	fields["poison_source_id"] = id
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.poison, Values: fields, MaxLen: int64(s.poisonMaxLen), Approx: true})
		p.XAck(ctx, s.name, s.group, id)
		return nil
	})
	return err
}

// ack acknowledges the entry itself once the handler succeeded, with the worker's own client: the
// subscriber's ack is dropped when the router is closing, and a drained message must not be redelivered.
func (s stream) ackMiddleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		msgs, err := h(msg)
		if err != nil {
			return nil, err
		}
		if err := s.rdb.XAck(msg.Context(), s.name, s.group, msg.UUID).Err(); err != nil {
			return nil, fmt.Errorf("ack entry %s: %w", msg.UUID, err)
		}
		return msgs, nil
	}
}

//go:embed reclaim.lua
var reclaimLua string
var reclaimScript = redis.NewScript(reclaimLua)

// reclaim sets the idle time of the entry msgID if this consumer still owns it (reclaim.lua).
func (s stream) reclaim(ctx context.Context, msgID string, idle time.Duration, uncount bool) error {
	flag := 0
	if uncount {
		flag = 1
	}
	return reclaimScript.Run(ctx, s.rdb, []string{s.name}, s.group, s.consumer, msgID, idle.Milliseconds(), flag).Err()
}

// keepalive resets the idle time of the entry in Redis every third of the claim idle time while it is
// handled, so a slow order (waiting for a hot lock) is not claimed by another worker. Only an entry still
// owned by this consumer is touched. It returns only once its last reset is done: a reset after the
// attempt was handed back would delay the retry by a whole claim idle time.
func (s stream) keepaliveMiddleware(claimIdle time.Duration) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			done := make(chan struct{})
			var wg sync.WaitGroup
			defer wg.Wait()
			defer close(done)
			wg.Go(func() {
				tick := time.NewTicker(claimIdle / 3)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						c, cancel := context.WithTimeout(ctx, claimIdle/3)
						_ = s.reclaim(c, msg.UUID, 0, false)
						cancel()
					}
				}
			})
			return h(msg)
		}
	}
}

// panicError is a panic of the handler, recovered.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// recoverMiddleware turns a panic of the handler into a *panicError, which the poison middleware sends to
// the poison stream: a message that panics once would panic again.
func recoverMiddleware(logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (msgs []*message.Message, err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &panicError{value: v, stack: debug.Stack()}
					logger.Error("handler panicked", "id", msg.UUID, "panic", v, "stack", string(err.(*panicError).stack))
				}
			}()
			return h(msg)
		}
	}
}

// drain runs the handler under a context that survives the router's shutdown (which cancels message
// contexts at once) until the worker's drain deadline, so in-flight orders finish on SIGTERM.
func drainMiddleware(drain context.Context) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			orig := msg.Context()
			ctx, cancel := context.WithCancelCause(context.WithoutCancel(orig))
			stop := context.AfterFunc(drain, func() { cancel(context.Cause(drain)) })
			defer func() {
				stop()
				cancel(nil)
				msg.SetContext(orig)
			}()
			msg.SetContext(ctx)
			return h(msg)
		}
	}
}
