package stream

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
)

// Fields the subscriber's client adds to an entry for the unmarshaller, which is only given an entry's
// fields. They are removed before the fields are read.
const (
	entryIDField         = "\x00stockflow-entry-id"
	entryDeliveriesField = "\x00stockflow-deliveries"
)

// MaxEntryBytes is the largest stream entry (field names and values) a worker accepts: an order payload at
// its limit plus room for Watermill's fields and the trace context. Larger ones are poisoned in Redis.
const MaxEntryBytes = handlers.MaxPayload + 16<<10

// Reading when the stream is empty: the pause between two reads, doubling up to the maximum.
const (
	minReadPause = 10 * time.Millisecond
	maxReadPause = 100 * time.Millisecond
)

//go:embed fetch.lua
var fetchLua string
var fetchScript = redis.NewScript(fetchLua)

// Reader is the Redis client given to one redisstream subscriber. It changes how the subscriber reads,
// claims and acks:
//   - Entries are read and claimed by fetch.lua, which poisons oversized entries inside Redis (a worker
//     never holds them: a blocking XREADGROUP would hand over any entry whole) and returns each entry's
//     delivery count. The price is polling: an idle consumer reads every 10-100 ms.
//   - Every entry is tagged with its stream ID, so the message UUID is the entry ID: stable across
//     redeliveries, and what XACK needs.
//   - A missing consumer group (Redis restarted without its data, the stream deleted) is created again.
//   - XACK does nothing: the worker acks itself (ack middleware, poison), so that handing a message back
//     to the subscriber without an ack leaves the entry pending, to be retried.
//   - Close does nothing: a subscriber closes the client it was given, and all subscribers share one.
type Reader struct {
	redis.UniversalClient
	cfg   ReaderConfig
	pause time.Duration // the read loop's current pause; only the read loop touches it
}

// ReaderConfig is what the readers of one worker share.
type ReaderConfig struct {
	Stream, Group, Poison string
	PoisonMaxLen          int // approximate bound of the poison stream
	Logger                *slog.Logger
	// Failing is when reads started failing (unix ns), 0 while they succeed.
	Failing *atomic.Int64
	// ReplayFrom is where a lost group is created again: the first entry whose outcome record may still
	// exist (see the worker's OUTCOME_TTL).
	ReplayFrom func(time.Time) string
}

// NewReader returns a reader on rdb, which it never closes.
func NewReader(rdb redis.UniversalClient, cfg ReaderConfig) *Reader {
	return &Reader{UniversalClient: rdb, cfg: cfg}
}

func (*Reader) Close() error { return nil }

func (*Reader) XAck(context.Context, string, string, ...string) *redis.IntCmd {
	return redis.NewIntResult(0, nil)
}

func (c *Reader) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	msgs, err := c.fetch(ctx, "read", a.Consumer)
	switch {
	case redis.HasErrorPrefix(err, "NOGROUP"):
		if err = c.recreateGroup(ctx); errors.Is(err, errNoStream) {
			err = nil
			c.wait(ctx)
		}
	case err == nil && len(msgs) == 0:
		c.wait(ctx)
	case err == nil:
		c.pause = 0
		return redis.NewXStreamSliceCmdResult([]redis.XStream{{Stream: c.cfg.Stream, Messages: msgs}}, nil)
	}
	if err == nil {
		err = redis.Nil // nothing read: the subscriber reads again at once
	}
	return redis.NewXStreamSliceCmdResult(nil, err)
}

// wait pauses the read loop after an empty read, 10 ms doubling up to 100 ms.
func (c *Reader) wait(ctx context.Context) {
	c.pause = min(max(2*c.pause, minReadPause), maxReadPause)
	select {
	case <-ctx.Done():
	case <-time.After(c.pause):
	}
}

func (c *Reader) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	args := []any{a.MinIdle.Milliseconds()}
	for _, id := range a.Messages {
		args = append(args, id)
	}
	return redis.NewXMessageSliceCmdResult(c.fetch(ctx, "claim", a.Consumer, args...))
}

// errNoStream: the orders stream does not exist (Redis lost its data, or the key was deleted).
var errNoStream = errors.New("stream: the orders stream does not exist")

// recreateGroup creates the consumer group again, from the first entry younger than OUTCOME_TTL
// (ReaderConfig.ReplayFrom): every such entry is delivered again. That loses nothing the group could still
// decide safely, and costs no second reservation: an order already decided only yields its recorded
// outcome again, its record being younger than OUTCOME_TTL too. While the stream itself is missing
// (errNoStream) there is nothing to lose: the group is created once the next order creates the stream,
// and the worker is not ready meanwhile, which tells the operator that Redis lost its data.
func (c *Reader) recreateGroup(ctx context.Context) error {
	err := c.UniversalClient.XGroupCreate(ctx, c.cfg.Stream, c.cfg.Group, c.cfg.ReplayFrom(time.Now())).Err()
	switch {
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return nil // another consumer was first
	case err != nil && strings.Contains(err.Error(), "requires the key to exist"):
		return errNoStream
	case err != nil:
		return fmt.Errorf("consumer group %s of stream %s is missing and could not be created: %w", c.cfg.Group, c.cfg.Stream, err)
	}
	c.cfg.Logger.Warn("consumer group was missing: created it again, from the first entry younger than OUTCOME_TTL",
		"stream", c.cfg.Stream, "group", c.cfg.Group)
	groupsRecreated.Add(ctx, 1)
	return nil
}

func (c *Reader) fetch(ctx context.Context, mode, consumer string, args ...any) ([]redis.XMessage, error) {
	argv := append([]any{mode, c.cfg.Group, consumer, MaxEntryBytes, c.cfg.PoisonMaxLen}, args...)
	reply, err := fetchScript.Run(ctx, c.UniversalClient, []string{c.cfg.Stream, c.cfg.Poison}, argv...).Slice()
	if err != nil {
		c.cfg.Failing.CompareAndSwap(0, time.Now().UnixNano())
		return nil, err
	}
	c.cfg.Failing.Store(0)
	msgs, poisonedIDs, err := parseFetch(reply)
	for id, bytes := range poisonedIDs {
		c.cfg.Logger.Warn("poisoned oversized entry", "stream", c.cfg.Stream, "id", id, "bytes", bytes, "limit", MaxEntryBytes)
		Poisoned.Add(ctx, 1, reasonOversized)
	}
	return msgs, err
}

// parseFetch reads fetch.lua's reply {{{id, deliveries, {field, value, ...}}, ...}, {{id, bytes}, ...}}.
func parseFetch(reply []any) (msgs []redis.XMessage, poisoned map[string]int64, err error) {
	bad := fmt.Errorf("stream: unexpected fetch reply %.200v", reply)
	if len(reply) != 2 {
		return nil, nil, bad
	}
	entries, ok1 := reply[0].([]any)
	oversized, ok2 := reply[1].([]any)
	if !ok1 || !ok2 {
		return nil, nil, bad
	}
	poisoned = parseOversized(oversized)
	for _, e := range entries {
		m, ok := parseEntry(e)
		if !ok {
			return nil, poisoned, bad
		}
		msgs = append(msgs, m)
	}
	return msgs, poisoned, nil
}

// parseOversized reads {{id, bytes}, ...}: the entries fetch.lua poisoned.
func parseOversized(list []any) map[string]int64 {
	poisoned := map[string]int64{}
	for _, p := range list {
		if p, ok := p.([]any); ok && len(p) == 2 {
			id, _ := p[0].(string)
			poisoned[id], _ = p[1].(int64)
		}
	}
	return poisoned
}

// parseEntry reads {id, deliveries, {field, value, ...}} into a message whose values carry the id and the
// delivery count for the Unmarshaller.
func parseEntry(e any) (redis.XMessage, bool) {
	parts, ok := e.([]any)
	if !ok || len(parts) != 3 {
		return redis.XMessage{}, false
	}
	id, ok1 := parts[0].(string)
	deliveries, ok2 := parts[1].(int64)
	fields, ok3 := parts[2].([]any)
	values, ok4 := fieldMap(fields)
	if !(ok1 && ok2 && ok3 && ok4) {
		return redis.XMessage{}, false
	}
	values[entryIDField] = id
	values[entryDeliveriesField] = deliveries
	return redis.XMessage{ID: id, Values: values}, true
}

// fieldMap turns {field, value, ...} into a map, with room for the two fields a Reader adds.
func fieldMap(fields []any) (map[string]any, bool) {
	values := make(map[string]any, len(fields)/2+2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		values[k] = fields[i+1]
	}
	return values, len(fields)%2 == 0
}
