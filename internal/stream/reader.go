package stream

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fields the subscriber's client adds to an entry for the unmarshaller, which is only given an entry's
// fields. They are removed before the fields are read.
const (
	entryIDField         = "\x00stockflow-entry-id"
	entryDeliveriesField = "\x00stockflow-deliveries"
	entryPartitionField  = "\x00stockflow-partition"
)

// MaxEntryBytes is the largest stream entry (field names and values) a worker accepts: an order payload at
// its limit (64 KiB, handlers.MaxPayload) plus room for Watermill's fields and the trace context. Larger
// ones are poisoned in Redis.
const MaxEntryBytes = 64<<10 + 16<<10

// Reading when the stream is empty: the pause between two reads, doubling up to the maximum.
const (
	minReadPause = 10 * time.Millisecond
	maxReadPause = 100 * time.Millisecond
)

//go:embed fetch.lua
var fetchLua string
var fetchScript = redis.NewScript(fetchLua)

//go:embed prune_consumer.lua
var pruneLua string
var pruneScript = redis.NewScript(pruneLua)

// A partition whose reads fail (its cluster node is down) is skipped for a while, doubling up to the
// maximum, so the other partitions are read at full speed meanwhile.
const (
	minFailedPause = 100 * time.Millisecond
	maxFailedPause = 5 * time.Second
)

// Reader is the Redis client given to one redisstream subscriber. It changes how the subscriber reads,
// claims and acks:
//   - The subscriber's topic stands for every partition of the orders (Config.Partitions): each read takes
//     the next entry of the first partition that has one, starting after the partition read last, and each
//     claim round looks at the next partition in turn. Where it needs an entry id or a consumer name with
//     its partition (XPENDING's reply, then XCLAIM; XINFO CONSUMERS, then XGROUP DELCONSUMER), it hands the
//     subscriber "<partition>/<id>".
//   - Entries are read and claimed by fetch.lua, which poisons oversized entries inside Redis (a worker
//     never holds them: a blocking XREADGROUP would hand over any entry whole) and returns each entry's
//     delivery count. The price is polling: an idle consumer reads every 10-100 ms.
//   - Every entry is tagged with its stream ID and partition, so the message UUID is the entry ID: stable
//     across redeliveries, and what XACK needs (EntryPartition).
//   - A missing consumer group (Redis restarted without its data, the stream deleted) is created again.
//   - XACK does nothing: the worker acks itself (ack middleware, poison), so that handing a message back
//     to the subscriber without an ack leaves the entry pending, to be retried.
//   - Close does nothing: a subscriber closes the client it was given, and all subscribers share one.
type Reader struct {
	redis.UniversalClient
	cfg   ReaderConfig
	pause time.Duration // the read loop's current pause; only the read loop touches it
	next  int           // the partition the next read starts at; only the read loop touches it
	// failed is, by partition, how long its reads are skipped after a failure and until when; only the
	// read loop touches it.
	failed  []failure
	failing int // partitions in failed with a pause
	// claimNext and consumersNext are the partitions the next claim round and consumer check look at.
	claimNext, consumersNext atomic.Int64
}

type failure struct {
	pause time.Duration
	until time.Time
}

// ReaderConfig is what the readers of one worker share.
type ReaderConfig struct {
	Partitions   []Partition
	Group        string
	PoisonMaxLen int // approximate bound of the poison streams
	Logger       *slog.Logger
	// Failing is when reads started failing (unix ns), 0 while they succeed.
	Failing *atomic.Int64
	// ReplayFrom is where a lost group is created again: the first entry whose outcome record may still
	// exist (see the worker's OUTCOME_TTL).
	ReplayFrom func(time.Time) string
}

// NewReader returns a reader on rdb, which it never closes. The readers of a worker's consumers read from
// different partitions first (consumer i from partition i), and start their claim rounds at a random one,
// so that the workers together look at every partition soon.
func NewReader(rdb redis.UniversalClient, cfg ReaderConfig, consumer int) *Reader {
	n := len(cfg.Partitions)
	c := &Reader{UniversalClient: rdb, cfg: cfg, next: consumer % n, failed: make([]failure, n)}
	c.claimNext.Store(rand.Int64N(int64(n)))
	c.consumersNext.Store(rand.Int64N(int64(n)))
	return c
}

func (*Reader) Close() error { return nil }

func (*Reader) XAck(context.Context, string, string, ...string) *redis.IntCmd {
	return redis.NewIntResult(0, nil)
}

// XGroupCreateMkStream does nothing: the worker created the group of every partition before the
// subscribers started, and a read creates a lost one again.
func (*Reader) XGroupCreateMkStream(context.Context, string, string, string) *redis.StatusCmd {
	return redis.NewStatusResult("OK", nil)
}

// XReadGroup reads the next entry of the first partition that has one. A partition whose read failed is
// skipped for a while (failure.pause); the read fails only when every partition tried failed.
func (c *Reader) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	n, now := len(c.cfg.Partitions), time.Now()
	var failed error
	tried, failures := 0, 0
	for k := range n {
		p := c.cfg.Partitions[(c.next+k)%n]
		if now.Before(c.failed[p.Index].until) {
			continue
		}
		tried++
		msgs, err := c.read(ctx, p, a.Consumer)
		c.noteRead(p, err)
		if err != nil {
			failed, failures = cmp.Or(failed, err), failures+1
			continue
		}
		if len(msgs) > 0 {
			c.next, c.pause = (p.Index+1)%n, 0
			return redis.NewXStreamSliceCmdResult([]redis.XStream{{Stream: p.Orders, Messages: msgs}}, nil)
		}
	}
	if failures == 0 || failures < tried {
		c.wait(ctx)
		failed = redis.Nil // nothing read: the subscriber reads again at once
	}
	return redis.NewXStreamSliceCmdResult(nil, failed)
}

// noteRead records how a read of partition p went: a failure skips the partition for a while, longer
// each time; a success clears it. Reads count as failing (ReaderConfig.Failing) while some partition fails.
func (c *Reader) noteRead(p Partition, err error) {
	f := &c.failed[p.Index]
	if err == nil {
		if f.pause > 0 {
			c.cfg.Logger.Info("reading a partition works again", "stream", p.Orders)
			*f = failure{}
			c.failing--
		}
		if c.failing == 0 {
			c.cfg.Failing.Store(0)
		}
		return
	}
	if f.pause == 0 {
		c.cfg.Logger.Warn("reading a partition failed; skipping it for a while", "stream", p.Orders, "err", err)
		c.failing++
	}
	f.pause = min(max(2*f.pause, minFailedPause), maxFailedPause)
	f.until = time.Now().Add(f.pause)
	c.cfg.Failing.CompareAndSwap(0, time.Now().UnixNano())
}

// read fetches the next entry of partition p, creating its group again when it was lost.
func (c *Reader) read(ctx context.Context, p Partition, consumer string) ([]redis.XMessage, error) {
	msgs, err := c.fetch(ctx, p, "read", consumer)
	if redis.HasErrorPrefix(err, "NOGROUP") {
		if err = c.recreateGroup(ctx, p); errors.Is(err, errNoStream) {
			err = nil
		}
	}
	return msgs, err
}

// wait pauses the read loop after an empty read, 10 ms doubling up to 100 ms.
func (c *Reader) wait(ctx context.Context) {
	c.pause = min(max(2*c.pause, minReadPause), maxReadPause)
	select {
	case <-ctx.Done():
	case <-time.After(c.pause):
	}
}

// XPendingExt looks at one partition per call, the next in turn, and names each entry
// "<partition>/<id>" for XClaim.
func (c *Reader) XPendingExt(ctx context.Context, a *redis.XPendingExtArgs) *redis.XPendingExtCmd {
	p := c.turn(&c.claimNext)
	args := *a
	args.Stream = p.Orders
	pending, err := c.UniversalClient.XPendingExt(ctx, &args).Result()
	for i := range pending {
		pending[i].ID = qualify(p, pending[i].ID)
	}
	cmd := redis.NewXPendingExtCmd(ctx)
	cmd.SetVal(pending)
	cmd.SetErr(err)
	return cmd
}

// XClaim claims entries named by XPendingExt.
func (c *Reader) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	var claimed []redis.XMessage
	for _, name := range a.Messages {
		p, id, err := c.unqualify(name)
		if err != nil {
			return redis.NewXMessageSliceCmdResult(claimed, err)
		}
		msgs, err := c.fetch(ctx, p, "claim", a.Consumer, a.MinIdle.Milliseconds(), id)
		if err != nil {
			return redis.NewXMessageSliceCmdResult(claimed, err)
		}
		claimed = append(claimed, msgs...)
	}
	return redis.NewXMessageSliceCmdResult(claimed, nil)
}

// XInfoConsumers looks at one partition per call, the next in turn, and names each consumer
// "<partition>/<name>" for XGroupDelConsumer (Watermill deletes the consumers idle for long with nothing
// pending).
func (c *Reader) XInfoConsumers(ctx context.Context, _, group string) *redis.XInfoConsumersCmd {
	p := c.turn(&c.consumersNext)
	consumers, err := c.UniversalClient.XInfoConsumers(ctx, p.Orders, group).Result()
	for i := range consumers {
		consumers[i].Name = qualify(p, consumers[i].Name)
	}
	cmd := redis.NewXInfoConsumersCmd(ctx, p.Orders, group)
	cmd.SetVal(consumers)
	cmd.SetErr(err)
	return cmd
}

// XGroupDelConsumer deletes the consumer only when it still has no pending entries (Group.PruneConsumer): one
// that read an entry since XInfoConsumers listed it keeps it.
func (c *Reader) XGroupDelConsumer(ctx context.Context, _, group, name string) *redis.IntCmd {
	p, consumer, err := c.unqualify(name)
	if err != nil {
		return redis.NewIntResult(0, err)
	}
	outcome, _, err := Group{p.Orders, group}.PruneConsumer(ctx, c.UniversalClient, consumer, 0)
	if outcome == "deleted" {
		return redis.NewIntResult(1, err)
	}
	return redis.NewIntResult(0, err)
}

// Group is a consumer group of a stream.
type Group struct{ Stream, Name string }

// PruneConsumer deletes consumer of the group when it has no pending entries and has been idle longer
// than minIdle, checked and done in one step inside Redis (prune_consumer.lua): a consumer that reads an
// entry meanwhile is never deleted with it, which would drop the entry from the pending list. It returns
// what it found: "deleted", "pending", "active" or "missing", with the idle time or pending count it
// decided on.
func (g Group) PruneConsumer(ctx context.Context, rdb redis.Scripter, consumer string, minIdle time.Duration) (string, int64, error) {
	reply, err := pruneScript.Run(ctx, rdb, []string{g.Stream}, g.Name, consumer, minIdle.Milliseconds()).Slice()
	if err != nil {
		return "", 0, fmt.Errorf("prune consumer %s: %w", consumer, err)
	}
	if len(reply) != 2 {
		return "", 0, fmt.Errorf("prune consumer %s: unexpected script reply %v", consumer, reply)
	}
	outcome, _ := reply[0].(string)
	n, _ := reply[1].(int64)
	return outcome, n, nil
}

// turn returns the partition next names and moves it on.
func (c *Reader) turn(next *atomic.Int64) Partition {
	n := int64(len(c.cfg.Partitions))
	return c.cfg.Partitions[(next.Add(1)-1)%n]
}

// qualify names what belongs to partition p: "<partition>/<name>".
func qualify(p Partition, name string) string { return strconv.Itoa(p.Index) + "/" + name }

// unqualify reads a name qualify made.
func (c *Reader) unqualify(name string) (Partition, string, error) {
	i, rest, ok := strings.Cut(name, "/")
	n, err := strconv.Atoi(i)
	if !ok || err != nil || n < 0 || n >= len(c.cfg.Partitions) {
		return Partition{}, "", fmt.Errorf("stream: %q names no partition", name)
	}
	return c.cfg.Partitions[n], rest, nil
}

// errNoStream: the orders stream does not exist (Redis lost its data, or the key was deleted).
var errNoStream = errors.New("stream: the orders stream does not exist")

// recreateGroup creates partition p's consumer group again, from the first entry younger than OUTCOME_TTL
// (ReaderConfig.ReplayFrom): every such entry is delivered again. That loses nothing the group could still
// decide safely, and costs no second reservation: an order already decided only yields its recorded
// outcome again, its record being younger than OUTCOME_TTL too. While the stream itself is missing
// (errNoStream) there is nothing to lose: the group is created once the next order creates the stream,
// and the worker is not ready meanwhile, which tells the operator that Redis lost its data.
func (c *Reader) recreateGroup(ctx context.Context, p Partition) error {
	err := c.UniversalClient.XGroupCreate(ctx, p.Orders, c.cfg.Group, c.cfg.ReplayFrom(time.Now())).Err()
	switch {
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return nil // another consumer was first
	case err != nil && strings.Contains(err.Error(), "requires the key to exist"):
		return errNoStream
	case err != nil:
		return fmt.Errorf("consumer group %s of stream %s is missing and could not be created: %w", c.cfg.Group, p.Orders, err)
	}
	c.cfg.Logger.Warn("consumer group was missing: created it again, from the first entry younger than OUTCOME_TTL",
		"stream", p.Orders, "group", c.cfg.Group)
	groupsRecreated.Add(ctx, 1)
	return nil
}

// fetch runs fetch.lua on partition p and tags the entries with p.
func (c *Reader) fetch(ctx context.Context, p Partition, mode, consumer string, args ...any) ([]redis.XMessage, error) {
	argv := append([]any{mode, c.cfg.Group, consumer, MaxEntryBytes, c.cfg.PoisonMaxLen}, args...)
	reply, err := fetchScript.Run(ctx, c.UniversalClient, []string{p.Orders, p.Poison}, argv...).Slice()
	if err != nil {
		return nil, err
	}
	msgs, poisonedIDs, err := parseFetch(reply)
	for id, bytes := range poisonedIDs {
		c.cfg.Logger.Warn("poisoned oversized entry", "stream", p.Orders, "id", id, "bytes", bytes, "limit", MaxEntryBytes)
		Poisoned.Add(ctx, 1, reasonOversized)
	}
	for _, m := range msgs {
		m.Values[entryPartitionField] = int64(p.Index)
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
