package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
)

// Fields the subscriber's client adds to an entry for the unmarshaller, which is only given an entry's
// fields. They are removed before the fields are read.
const (
	entryIDField         = "\x00stockflow-entry-id"
	entryDeliveriesField = "\x00stockflow-deliveries"
)

// Metadata the worker sets on a message; the same keys sent by a producer are dropped.
const (
	// metaBadEntry marks an entry that cannot be read as a message; its value is the reason. The poison
	// middleware sends such messages to the poison stream without running the handler.
	metaBadEntry = "stockflow_bad_entry"
	// metaDeliveries is how many times the entry was delivered, failed attempts given back not counted.
	metaDeliveries = "stockflow_deliveries"
)

// maxEntryBytes is the largest stream entry (field names and values) a worker accepts: an order payload at
// its limit plus room for Watermill's fields and the trace context. Larger ones are poisoned in Redis.
const maxEntryBytes = handlers.MaxPayload + 16<<10

// Reading when the stream is empty: the pause between two reads, doubling up to the maximum.
const (
	minReadPause = 10 * time.Millisecond
	maxReadPause = 100 * time.Millisecond
)

//go:embed fetch.lua
var fetchLua string
var fetchScript = redis.NewScript(fetchLua)

// subscriberClient is the Redis client given to one redisstream subscriber. It changes how the subscriber
// reads, claims and acks:
//   - Entries are read and claimed by fetch.lua, which poisons oversized entries inside Redis (a worker
//     never holds them: a blocking XREADGROUP would hand over any entry whole) and returns each entry's
//     delivery count. The price is polling: an idle consumer reads every 10-100 ms.
//   - Every entry is tagged with its stream ID, so the message UUID is the entry ID: stable across
//     redeliveries, and what XACK needs.
//   - A missing consumer group (Redis restarted without its data, the stream deleted) is created again.
//   - XACK does nothing: the worker acks itself (ack middleware, poison), so that handing a message back
//     to the subscriber without an ack leaves the entry pending, to be retried.
//   - Close does nothing: a subscriber closes the client it was given, and all subscribers share one.
type subscriberClient struct {
	redis.UniversalClient
	s      stream
	logger *slog.Logger
	pause  time.Duration // the read loop's current pause; only the read loop touches it
	// failing is when fetches started failing (unix ns), 0 while they succeed; shared by the worker.
	failing *atomic.Int64
	// replayFrom is where a lost group is created again (Config.replayFrom).
	replayFrom func(time.Time) string
}

func (*subscriberClient) Close() error { return nil }

func (*subscriberClient) XAck(context.Context, string, string, ...string) *redis.IntCmd {
	return redis.NewIntResult(0, nil)
}

func (c *subscriberClient) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
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
		return redis.NewXStreamSliceCmdResult([]redis.XStream{{Stream: c.s.name, Messages: msgs}}, nil)
	}
	if err == nil {
		err = redis.Nil // nothing read: the subscriber reads again at once
	}
	return redis.NewXStreamSliceCmdResult(nil, err)
}

// wait pauses the read loop after an empty read, 10 ms doubling up to 100 ms.
func (c *subscriberClient) wait(ctx context.Context) {
	c.pause = min(max(2*c.pause, minReadPause), maxReadPause)
	select {
	case <-ctx.Done():
	case <-time.After(c.pause):
	}
}

func (c *subscriberClient) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	args := []any{a.MinIdle.Milliseconds()}
	for _, id := range a.Messages {
		args = append(args, id)
	}
	return redis.NewXMessageSliceCmdResult(c.fetch(ctx, "claim", a.Consumer, args...))
}

// errNoStream: the orders stream does not exist (Redis lost its data, or the key was deleted).
var errNoStream = errors.New("worker: the orders stream does not exist")

// recreateGroup creates the consumer group again, from the first entry younger than OUTCOME_TTL
// (Config.replayFrom): every such entry is delivered again. That loses nothing the group could still
// decide safely, and costs no second reservation: an order already decided only yields its recorded
// outcome again, its record being younger than OUTCOME_TTL too. While the stream itself is missing
// (errNoStream) there is nothing to lose: the group is created once the next order creates the stream,
// and the worker is not ready meanwhile, which tells the operator that Redis lost its data.
func (c *subscriberClient) recreateGroup(ctx context.Context) error {
	err := c.UniversalClient.XGroupCreate(ctx, c.s.name, c.s.group, c.replayFrom(time.Now())).Err()
	switch {
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return nil // another consumer was first
	case err != nil && strings.Contains(err.Error(), "requires the key to exist"):
		return errNoStream
	case err != nil:
		return fmt.Errorf("consumer group %s of stream %s is missing and could not be created: %w", c.s.group, c.s.name, err)
	}
	c.logger.Warn("consumer group was missing: created it again, from the first entry younger than OUTCOME_TTL",
		"stream", c.s.name, "group", c.s.group)
	groupsRecreated.Add(ctx, 1)
	return nil
}

func (c *subscriberClient) fetch(ctx context.Context, mode, consumer string, args ...any) ([]redis.XMessage, error) {
	argv := append([]any{mode, c.s.group, consumer, maxEntryBytes, c.s.poisonMaxLen}, args...)
	reply, err := fetchScript.Run(ctx, c.UniversalClient, []string{c.s.name, c.s.poison}, argv...).Slice()
	if err != nil {
		c.failing.CompareAndSwap(0, time.Now().UnixNano())
		return nil, err
	}
	c.failing.Store(0)
	msgs, poisonedIDs, err := parseFetch(reply)
	for id, bytes := range poisonedIDs {
		c.logger.Warn("poisoned oversized entry", "stream", c.s.name, "id", id, "bytes", bytes, "limit", maxEntryBytes)
		poisoned.Add(ctx, 1, reasonOversized)
	}
	return msgs, err
}

// parseFetch reads fetch.lua's reply {{{id, deliveries, {field, value, ...}}, ...}, {{id, bytes}, ...}}.
func parseFetch(reply []any) (msgs []redis.XMessage, poisoned map[string]int64, err error) {
	bad := fmt.Errorf("worker: unexpected fetch reply %.200v", reply)
	if len(reply) != 2 {
		return nil, nil, bad
	}
	entries, ok1 := reply[0].([]any)
	oversized, ok2 := reply[1].([]any)
	if !ok1 || !ok2 {
		return nil, nil, bad
	}
	poisoned = map[string]int64{}
	for _, p := range oversized {
		if p, ok := p.([]any); ok && len(p) == 2 {
			id, _ := p[0].(string)
			poisoned[id], _ = p[1].(int64)
		}
	}
	for _, e := range entries {
		m, ok := parseEntry(e)
		if !ok {
			return nil, poisoned, bad
		}
		msgs = append(msgs, m)
	}
	return msgs, poisoned, nil
}

func parseEntry(e any) (redis.XMessage, bool) {
	parts, ok := e.([]any)
	if !ok || len(parts) != 3 {
		return redis.XMessage{}, false
	}
	id, ok1 := parts[0].(string)
	deliveries, ok2 := parts[1].(int64)
	fields, ok3 := parts[2].([]any)
	if !ok1 || !ok2 || !ok3 || len(fields)%2 != 0 {
		return redis.XMessage{}, false
	}
	values := make(map[string]any, len(fields)/2+2)
	for i := 0; i < len(fields); i += 2 {
		k, _ := fields[i].(string)
		values[k] = fields[i+1]
	}
	values[entryIDField] = id
	values[entryDeliveriesField] = deliveries
	return redis.XMessage{ID: id, Values: values}, true
}

// entryUnmarshaller reads Watermill entries (_watermill_message_uuid, metadata, payload) and plain ones
// that any Redis client can write (XADD orders * payload '<json>'). It never fails: an error would stop the
// subscriber for good and leave the entry pending for the next consumer to choke on. An entry it cannot
// read becomes a message marked with metaBadEntry, for the poison stream.
type entryUnmarshaller struct{}

func (entryUnmarshaller) Marshal(topic string, msg *message.Message) (map[string]any, error) {
	return redisstream.DefaultMarshallerUnmarshaller{}.Marshal(topic, msg)
}

func (entryUnmarshaller) Unmarshal(values map[string]any) (msg *message.Message, _ error) {
	id, _ := values[entryIDField].(string)
	deliveries, _ := values[entryDeliveriesField].(int64)
	delete(values, entryIDField)
	delete(values, entryDeliveriesField)
	if id == "" { // not read through subscriberClient
		id = watermill.NewUUID()
	}
	if _, ok := values[redisstream.UUIDHeaderKey]; !ok {
		values[redisstream.UUIDHeaderKey] = id
	}
	defer func() {
		// A panic here would take the whole process down (it runs in the subscriber's goroutine).
		if v := recover(); v != nil {
			msg = badEntry(id, fmt.Sprintf("unreadable entry: %v", v))
		}
		msg.Metadata.Set(metaDeliveries, strconv.FormatInt(deliveries, 10))
	}()
	msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(values)
	if err != nil {
		return badEntry(id, "unreadable entry: "+err.Error()), nil
	}
	msg.UUID = id
	delete(msg.Metadata, metaBadEntry) // only the worker marks entries
	// A foreign producer may send its trace context as a field of its own.
	if tp, ok := values["traceparent"].(string); ok && msg.Metadata.Get("traceparent") == "" {
		msg.Metadata.Set("traceparent", tp)
	}
	if _, ok := values["payload"]; !ok {
		msg.Metadata.Set(metaBadEntry, `entry has no "payload" field`)
	}
	return msg, nil
}

func badEntry(id, reason string) *message.Message {
	msg := message.NewMessage(id, nil)
	msg.Metadata.Set(metaBadEntry, reason)
	return msg
}

// deliveriesOf returns how many times msg's entry was delivered (attempts given back not counted).
func deliveriesOf(msg *message.Message) int {
	n, _ := strconv.Atoi(msg.Metadata.Get(metaDeliveries))
	return n
}
