package delivery

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/order"
)

// poisonReason says why err sends its message to the poison stream, or "" when it does not.
func poisonReason(err error) (string, metric.MeasurementOption) {
	if err == nil {
		return "", nil // without the two allocations errors.As makes
	}
	var panicked middleware.RecoveredPanicError
	var failed *permanentError
	switch {
	case errors.As(err, &panicked):
		return fmt.Sprintf("panic: %v", panicked.V), reasonPanic
	case errors.As(err, &failed):
		return failed.Error(), failed.kind()
	case errors.Is(err, order.ErrBadInput):
		return err.Error(), reasonBadInput
	}
	return "", nil
}

// maxReason bounds a poison reason (stored and logged): an error may quote the bad input it refused.
const maxReason = 1024

// truncate shortens s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// toPoison adds the entry id of partition p to p's poison stream with reason and acks it, in one MULTI.
func (c *Consumer) toPoison(ctx context.Context, p order.Partition, id, reason string) error {
	fields := map[string]any{}
	entries, err := c.rdb.XRange(ctx, p.Orders, id, id).Result()
	if err != nil {
		return err
	}
	for _, e := range entries {
		for k, v := range e.Values {
			fields[k] = v
		}
	}
	fields["poison_reason"] = reason
	fields["poison_source_stream"] = p.Orders
	fields["poison_source_id"] = id
	_, err = c.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.Poison, Values: fields, MaxLen: int64(c.poisonMaxLen), Approx: true})
		pipe.XAck(ctx, p.Orders, c.group, id)
		return nil
	})
	return err
}

//go:embed reclaim.lua
var reclaimLua string
var reclaimScript = redis.NewScript(reclaimLua)

// reclaim sets the idle time of partition p's entry msgID if this consumer still owns it (reclaim.lua).
func (c *Consumer) reclaim(ctx context.Context, p order.Partition, msgID string, idle time.Duration, uncount int64) error {
	return reclaimScript.Run(ctx, c.rdb, []string{p.Orders}, c.group, c.name, msgID, idle.Milliseconds(), uncount).Err()
}

// HandBackPending gives the entries the consumer still has pending back to the group, to be claimed at the
// next claim round; it returns how many it handed back. The entries it was working on or had read ahead
// (idle for less than half CLAIM_IDLE: keepAlive resets the idle time of the one being handled) are handed
// back uncounted; one already handed back after a failed attempt (idle for most of CLAIM_IDLE, retry)
// keeps its count, so a restart never erases a counted failure.
func (c *Consumer) HandBackPending(ctx context.Context) (n int, err error) {
	for _, p := range c.parts {
		handed, perr := c.handBackPartition(ctx, p)
		n, err = n+handed, cmp.Or(err, perr)
	}
	return n, err
}

// handBackPartition hands back the consumer's pending entries of partition p, 100 at a time.
func (c *Consumer) handBackPartition(ctx context.Context, p order.Partition) (n int, err error) {
	for start := "-"; ; {
		pending, perr := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.Orders, Group: c.group, Start: start,
			End: "+", Count: 100, Consumer: c.name}).Result()
		if perr != nil || len(pending) == 0 {
			return n, cmp.Or(err, perr)
		}
		start = "(" + pending[len(pending)-1].ID
		for _, e := range pending {
			var uncount int64
			if e.Idle < c.claimIdle/2 {
				uncount = e.RetryCount
			}
			if perr := c.reclaim(ctx, p, e.ID, c.claimIdle, uncount); perr == nil {
				n++
			} else {
				err = cmp.Or(err, perr)
			}
		}
	}
}
