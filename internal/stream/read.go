package stream

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
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

// A partition whose reads fail (its cluster node is down) is skipped for a while, doubling up to the
// maximum, so the other partitions are read at full speed meanwhile.
const (
	minFailedPause = 100 * time.Millisecond
	maxFailedPause = 5 * time.Second
)

// readErrorPause is the pause after a read that failed on every partition it tried.
const readErrorPause = 500 * time.Millisecond

//go:embed fetch.lua
var fetchLua string
var fetchScript = redis.NewScript(fetchLua)

type failure struct {
	pause time.Duration
	until time.Time
}

// read returns the next entry of the first partition that has one, as a message. A partition whose read
// failed is skipped for a while (failure.pause); read fails only when every partition it tried failed.
// When no partition has an entry, it pauses before returning nothing (wait).
func (s *Subscriber) read(ctx context.Context) ([]*message.Message, error) {
	n, now := len(s.cfg.Partitions), time.Now()
	var failed error
	tried, failures := 0, 0
	for k := range n {
		p := s.cfg.Partitions[(s.next+k)%n]
		if now.Before(s.failed[p.Index].until) {
			continue
		}
		tried++
		msgs, err := s.readPartition(ctx, p)
		if ctx.Err() != nil {
			return nil, ctx.Err() // closing: no partition failed
		}
		s.noteRead(p, err)
		if err != nil {
			failed, failures = cmp.Or(failed, err), failures+1
			continue
		}
		if len(msgs) > 0 {
			s.next, s.pause = (p.Index+1)%n, 0
			return msgs, nil
		}
	}
	if failures > 0 && failures == tried {
		return nil, failed
	}
	s.wait(ctx)
	return nil, nil
}

// noteRead records how a read of partition p went: a failure skips the partition for a while, longer
// each time; a success clears it. Reads count as failing (SubscriberConfig.Failing) while some partition
// fails.
func (s *Subscriber) noteRead(p Partition, err error) {
	f := &s.failed[p.Index]
	if err == nil {
		if f.pause > 0 {
			s.cfg.Logger.Info("reading a partition works again", "stream", p.Orders)
			*f = failure{}
			s.failing--
		}
		if s.failing == 0 {
			s.cfg.Failing.Store(0)
		}
		return
	}
	if f.pause == 0 {
		s.cfg.Logger.Warn("reading a partition failed; skipping it for a while", "stream", p.Orders, "err", err)
		s.failing++
	}
	f.pause = min(max(2*f.pause, minFailedPause), maxFailedPause)
	f.until = time.Now().Add(f.pause)
	s.cfg.Failing.CompareAndSwap(0, time.Now().UnixNano())
}

// skipped: reads of partition p are skipped after a failure.
func (s *Subscriber) skipped(p Partition) bool { return time.Now().Before(s.failed[p.Index].until) }

// readPartition fetches the next entry of partition p, creating its group again when it was lost.
func (s *Subscriber) readPartition(ctx context.Context, p Partition) ([]*message.Message, error) {
	msgs, err := s.fetch(ctx, p, "read")
	if redis.HasErrorPrefix(err, "NOGROUP") {
		if err = s.recreateGroup(ctx, p); errors.Is(err, errNoStream) {
			err = nil
		}
	}
	return msgs, err
}

// wait pauses the read loop after an empty read, 10 ms doubling up to 100 ms.
func (s *Subscriber) wait(ctx context.Context) {
	s.pause = min(max(2*s.pause, minReadPause), maxReadPause)
	pauseFor(ctx, s.pause)
}

// errNoStream: the orders stream does not exist (Redis lost its data, or the key was deleted).
var errNoStream = errors.New("stream: the orders stream does not exist")

// recreateGroup creates partition p's consumer group again, from the first entry younger than OUTCOME_TTL
// (SubscriberConfig.ReplayFrom): every such entry is delivered again. That loses nothing the group could
// still decide safely, and costs no second reservation: an order already decided only yields its recorded
// outcome again, its record being younger than OUTCOME_TTL too. While the stream itself is missing
// (errNoStream) there is nothing to lose: the group is created once the next order creates the stream,
// and the worker is not ready meanwhile, which tells the operator that Redis lost its data.
func (s *Subscriber) recreateGroup(ctx context.Context, p Partition) error {
	err := s.rdb.XGroupCreate(ctx, p.Orders, s.cfg.Group, s.cfg.ReplayFrom(time.Now())).Err()
	switch {
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return nil // another consumer was first
	case err != nil && strings.Contains(err.Error(), "requires the key to exist"):
		return errNoStream
	case err != nil:
		return fmt.Errorf("consumer group %s of stream %s is missing and could not be created: %w", s.cfg.Group, p.Orders, err)
	}
	s.cfg.Logger.Warn("consumer group was missing: created it again, from the first entry younger than OUTCOME_TTL",
		"stream", p.Orders, "group", s.cfg.Group)
	groupsRecreated.Add(ctx, 1)
	return nil
}

// fetch runs fetch.lua on partition p for the subscriber's consumer ("read", or "claim" with its
// arguments) and returns the entries it handed over as messages.
func (s *Subscriber) fetch(ctx context.Context, p Partition, mode string, args ...any) ([]*message.Message, error) {
	argv := append([]any{mode, s.cfg.Group, s.cfg.Consumer, MaxEntryBytes, s.cfg.PoisonMaxLen}, args...)
	reply, err := fetchScript.Run(ctx, s.rdb, []string{p.Orders, p.Poison}, argv...).Slice()
	if err != nil {
		return nil, err
	}
	entries, poisonedIDs, err := parseFetch(reply, p)
	for id, bytes := range poisonedIDs {
		s.cfg.Logger.Warn("poisoned oversized entry", "stream", p.Orders, "id", id, "bytes", bytes, "limit", MaxEntryBytes)
		Poisoned.Add(ctx, 1, reasonOversized)
	}
	msgs := make([]*message.Message, len(entries))
	for i, e := range entries {
		msgs[i] = e.Message()
	}
	return msgs, err
}

// parseFetch reads fetch.lua's reply {{{id, deliveries, {field, value, ...}}, ...}, {{id, bytes}, ...}}
// on partition p.
func parseFetch(reply []any, p Partition) (entries []Entry, poisoned map[string]int64, err error) {
	bad := fmt.Errorf("stream: unexpected fetch reply %.200v", reply)
	if len(reply) != 2 {
		return nil, nil, bad
	}
	list, ok1 := reply[0].([]any)
	oversized, ok2 := reply[1].([]any)
	if !ok1 || !ok2 {
		return nil, nil, bad
	}
	poisoned = parseOversized(oversized)
	for _, e := range list {
		entry, ok := parseEntry(e)
		if !ok {
			return nil, poisoned, bad
		}
		entry.Partition = p.Index
		entries = append(entries, entry)
	}
	return entries, poisoned, nil
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

// parseEntry reads {id, deliveries, {field, value, ...}}.
func parseEntry(e any) (Entry, bool) {
	parts, ok := e.([]any)
	if !ok || len(parts) != 3 {
		return Entry{}, false
	}
	id, ok1 := parts[0].(string)
	deliveries, ok2 := parts[1].(int64)
	fields, ok3 := parts[2].([]any)
	values, ok4 := fieldMap(fields)
	if !(ok1 && ok2 && ok3 && ok4) {
		return Entry{}, false
	}
	return Entry{ID: id, Deliveries: deliveries, Values: values}, true
}

// fieldMap turns {field, value, ...} into a map.
func fieldMap(fields []any) (map[string]any, bool) {
	values := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		values[k] = fields[i+1]
	}
	return values, len(fields)%2 == 0
}
