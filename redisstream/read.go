package redisstream

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Reading when the stream is empty without keyspace events: the pause between two reads, doubling up to
// the maximum.
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

// readLoop claims and reads entries and sends them to out, as many as there are free places in flight,
// until ctx ends.
func (s *reader) readLoop(ctx context.Context, out chan<- *message.Message) {
	for s.awaitRoom(ctx) {
		room := cap(s.slots) - len(s.slots)
		msgs := s.claim(ctx, min(room, s.cfg.ReadCount))
		if len(msgs) == 0 {
			msgs = s.read(ctx, min(room, s.cfg.ReadCount))
		}
		for _, msg := range msgs {
			if !s.send(ctx, out, msg) {
				return
			}
		}
	}
}

// awaitRoom waits until half the places in flight are free, or all of them are when fewer are taken, or
// RoomLinger after one is; it reports false when ctx ended first.
func (s *reader) awaitRoom(ctx context.Context) bool {
	low := max(cap(s.slots)/2, 1)
	var linger <-chan time.Time // nil until a place is free, with RoomLinger
	for n := len(s.slots); n > 0 && cap(s.slots)-n < low; n = len(s.slots) {
		if linger == nil && n < cap(s.slots) && s.cfg.RoomLinger > 0 {
			t := time.NewTimer(s.cfg.RoomLinger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-s.freed:
		case <-linger:
			return ctx.Err() == nil
		}
	}
	return ctx.Err() == nil
}

// send hands msg to out, taking a place in flight until the router acks or nacks it; it reports false when
// ctx ended first.
func (s *reader) send(ctx context.Context, out chan<- *message.Message, msg *message.Message) bool {
	handling := ctx
	if s.cfg.Handling != nil {
		handling = s.cfg.Handling
	}
	end := s.setContext(msg, handling)
	// A place is free unless a call made again handed over the entries of the call whose reply was lost,
	// more than the places free now: then this one waits for the first to be freed.
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		end()
		return false
	}
	if !s.cfg.Released {
		s.out.Store(msg, refOf(msg))
	}
	select {
	case out <- msg:
	case <-ctx.Done():
		end()
		s.out.Delete(msg)
		<-s.slots
		return false
	}
	if !s.cfg.Released {
		if s.cfg.ResendNacked {
			s.resending.Add(1)
		}
		go s.awaitAck(ctx, out, msg, handling, end)
	}
	return true
}

// read takes up to count entries from the partitions whose reads work, starting after the one read last,
// in one pipeline: count split evenly over them, or one each from the next count of them. When every
// partition was read empty since entries last came it waits for one (idle); it returns nothing then.
// While the doorbell is subscribed it reads only the partitions the doorbell wants (doorbell.wantedOf),
// and waits when there are none: an entry's event no longer costs a read of every partition (and a
// second one to find them empty) in every idle worker.
func (s *reader) read(ctx context.Context, count int) []*message.Message {
	armed := s.bell != nil && s.bell.armed
	parts := s.toRead(ctx, count, armed)
	if len(parts) == 0 {
		return nil
	}
	readable := len(parts)
	parts = parts[:min(len(parts), count)]
	pipe := s.rdb.Pipeline()
	reads := s.calls("read", parts, count)
	for i := range reads {
		reads[i].queue(ctx, pipe, s)
	}
	_, _ = pipe.Exec(ctx) // each partition's error is its own
	s.next = (parts[len(parts)-1].Index + 1) % len(s.cfg.Partitions)
	msgs, failures := s.readReplies(ctx, reads)
	if len(msgs) > 0 {
		s.pause, s.dry = 0, 0
	} else {
		s.dry += len(parts)
	}
	switch {
	case ctx.Err() != nil:
	case failures == len(parts):
		pauseFor(ctx, readErrorPause)
	case len(msgs) == count && s.bell != nil:
		s.bell.disarm(ctx) // busy: no events needed until the partitions run dry
		s.bell.askHelp(ctx)
	case armed: // the next read takes the partitions wanted meanwhile, or waits
		s.bell.found(ctx, len(msgs))
	case len(msgs) == 0 && s.dry >= readable && s.claims.next == 0: // (a claim round under way goes on first)
		// Idle only once every partition was found empty: a read of fewer partitions than there are
		// (fewer places free than partitions) goes on with the next ones, which may have a backlog that
		// no keyspace event announces again.
		s.dry = 0
		s.idle(ctx)
	}
	return msgs
}

// toRead lists the partitions a read takes: those whose reads work, from s.next on, and while the
// doorbell is subscribed (armed) only those it wants. With none it waits: for a failing partition's pause,
// or for an entry (idle) unless a claim round is under way, which goes on first.
func (s *reader) toRead(ctx context.Context, count int, armed bool) []partition {
	parts := s.readable()
	if len(parts) == 0 {
		pauseFor(ctx, minFailedPause)
		return nil
	}
	if armed {
		if parts = s.bell.wantedOf(parts, count); len(parts) == 0 && s.claims.next == 0 {
			s.idle(ctx)
		}
	}
	return parts
}

// readable lists the partitions whose reads are not skipped after a failure, from s.next on.
func (s *reader) readable() []partition {
	n := len(s.cfg.Partitions)
	parts := make([]partition, 0, n)
	for k := range n {
		if p := s.cfg.Partitions[(s.next+k)%n]; !s.skipped(p) {
			parts = append(parts, p)
		}
	}
	return parts
}

// calls are the fetch.lua calls in mode ("read" or "claim") of parts (no more parts than count), count split
// over them: evenly, the first ones one more.
func (s *reader) calls(mode string, parts []partition, count int) []fetchCall {
	calls := make([]fetchCall, len(parts))
	for i, p := range parts {
		calls[i] = s.call(mode, p, count/len(parts))
		if i < count%len(parts) {
			calls[i].count++
		}
	}
	return calls
}

// readReplies reads the fetch replies of a pipeline's reads, creating a lost group again; it returns the
// messages and how many partitions failed.
func (s *reader) readReplies(ctx context.Context, reads []fetchCall) (msgs []*message.Message, failures int) {
	for _, r := range reads {
		p := r.partition
		got, reply, err := s.reply(ctx, &r)
		if redis.HasErrorPrefix(err, "NOGROUP") {
			if err = s.recreateGroup(ctx, p); errors.Is(err, errNoStream) {
				err = nil
			}
		}
		if ctx.Err() != nil {
			return msgs, 0 // closing: no partition failed
		}
		s.noteRead(p, err)
		if err != nil {
			failures++
			if s.cfg.StopOnReadError != nil && s.cfg.StopOnReadError(err) {
				s.cfg.Logger.Error("a read failed: the subscription ends", "stream", p.Orders, "err", err)
				s.cancel()
			}
		}
		if s.bell != nil && (err != nil || len(got)+reply.poisoned >= r.count) {
			s.bell.want(p.Index) // it may have more: read it again while subscribed
		}
		msgs = append(msgs, got...)
	}
	return msgs, failures
}

// idle waits for an entry: for a keyspace event when Redis sends them (the first time it subscribes, and
// returns at once for a last read: an entry may have come meanwhile), or a poll pause, 10 ms doubling up
// to 100 ms, and then, with a Peeker, the peeker's next look that finds something. It returns by the next
// claim round at the latest.
func (s *reader) idle(ctx context.Context) {
	untilClaims := max(time.Until(s.claims.due), time.Millisecond)
	if s.bell == nil || s.bell.off {
		if s.pause == maxReadPause && s.cfg.Peeker != nil {
			streams, until := s.peekable(untilClaims)
			s.cfg.Peeker.wait(ctx, s.cfg.Group, streams, until)
			return
		}
		s.pause = min(max(2*s.pause, minReadPause), maxReadPause)
		pauseFor(ctx, min(s.pause, untilClaims))
		return
	}
	if s.bell.arm(ctx) {
		return
	}
	s.bell.wait(ctx, min(s.bell.untilAll(), untilClaims))
}

// peekable lists the streams of the partitions whose reads are not skipped, for the peeker, and how long
// to wait with it: d, or less when a skipped partition is to be read again sooner.
func (s *reader) peekable(d time.Duration) (streams []string, until time.Duration) {
	for _, p := range s.cfg.Partitions {
		if s.skipped(p) {
			d = min(d, time.Until(s.failed[p.Index].until))
			continue
		}
		streams = append(streams, p.Orders)
	}
	return streams, max(d, time.Millisecond)
}

// noteRead records how a read of partition p went: a failure skips the partition for a while, longer
// each time; a success clears it. Reads count as failing (readerConfig.Failing) while some partition
// fails.
func (s *reader) noteRead(p partition, err error) {
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
func (s *reader) skipped(p partition) bool { return time.Now().Before(s.failed[p.Index].until) }

// errNoStream: the orders stream does not exist (Redis lost its data, or the key was deleted).
var errNoStream = errors.New("redisstream: the orders stream does not exist")

// recreateGroup creates partition p's consumer group again, from the first entry younger than OUTCOME_TTL
// (readerConfig.ReplayFrom): every such entry is delivered again. That loses nothing the group could
// still decide safely, and costs no second reservation: an order already decided only yields its recorded
// outcome again, its record being younger than OUTCOME_TTL too. While the stream itself is missing
// (errNoStream) there is nothing to lose: the group is created once the next order creates the stream,
// and the worker is not ready meanwhile, which tells the operator that Redis lost its data.
func (s *reader) recreateGroup(ctx context.Context, p partition) error {
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

// fetchCall is one call of fetch.lua on a partition: a read, or a claim.
type fetchCall struct {
	partition
	mode  string // "read" or "claim"
	count int    // the most entries it hands over
	// cursor is a claim's: where its scan of the pending entries goes on (with ShouldClaim, where the next
	// scan goes on, which the script only notes)
	cursor string
	ids    []string // with ShouldClaim, a claim's: the entries chosen (choose), the only ones it claims
	// req is its request id: a call made again (go-redis resends it after a lost reply, or the next call
	// of its partition and mode after a failure, requests) hands the same entries over.
	req string
	cmd *redis.Cmd
}

// call is the next fetch.lua call in mode of partition p, for up to count entries.
func (s *reader) call(mode string, p partition, count int) fetchCall {
	c := fetchCall{partition: p, mode: mode, count: count, cursor: "0-0"}
	if mode == "claim" {
		c.cursor = s.claims.cursors[p.Index]
	}
	c.req = s.requests.next(c)
	return c
}

func (c *fetchCall) keys(s *reader) []string {
	return []string{c.Orders, c.Poison, FetchedKey(c.Orders, s.cfg.Group, s.cfg.Consumer, c.mode)}
}

func (c *fetchCall) args(s *reader) []any {
	args := []any{c.mode, s.cfg.Group, s.cfg.Consumer, s.cfg.MaxEntryBytes, s.cfg.PoisonMaxLen, c.count,
		s.cfg.ClaimIdle.Milliseconds(), c.cursor, c.req, s.fetchedFor().Milliseconds()}
	if c.mode == "claim" && s.cfg.ShouldClaim != nil {
		args = append(args, strings.Join(c.ids, ","))
	}
	return args
}

// fetchedFor is how long fetch.lua keeps what a call handed over (FetchedKey): longer than go-redis's resends
// and the subscriber's next call of the partition take, and at most half the claim idle time, so that an
// entry handed over again was idle for less than half of it: no consumer can have claimed it meanwhile (this
// one neither, which would have it out already), and its handler has half the claim idle time left before
// keepAlive's first reset. A call made again later finds no note: it reads anew, and the entries of the lost
// reply are claimed once idle, a delivery counted.
func (s *reader) fetchedFor() time.Duration { return min(time.Minute, s.cfg.ClaimIdle/2) }

// queue queues the call on pipe.
func (c *fetchCall) queue(ctx context.Context, pipe redis.Pipeliner, s *reader) {
	c.cmd = pipe.EvalSha(ctx, fetchScript.Hash(), c.keys(s), c.args(s)...)
}

// FetchedKey is where fetch.lua keeps what consumer's last call in mode handed over on stream (in its slot),
// so that the call made again hands the same entries over.
func FetchedKey(stream, group, consumer, mode string) string {
	return stream + ":fetched:" + group + ":" + mode + ":" + consumer
}

// reply reads the reply of a call queued in a pipeline, making the call again on its own (loading the script)
// when Redis did not know the script: the entries as messages, and what a claim reports. The oversized entries
// the script poisoned are logged and counted; so is a call whose reply was lost, its entries handed over by the
// call made again.
func (s *reader) reply(ctx context.Context, c *fetchCall) ([]*message.Message, claimReply, error) {
	reply, err := c.cmd.Slice()
	if redis.HasErrorPrefix(err, "NOSCRIPT") { // the script was flushed, or this node never saw it
		reply, err = fetchScript.Run(ctx, s.rdb, c.keys(s), c.args(s)...).Slice()
	}
	s.requests.done(*c, err)
	if err != nil {
		return nil, claimReply{}, err
	}
	entries, poisonedIDs, claim, err := parseFetch(reply, c.partition)
	for id, bytes := range poisonedIDs {
		s.cfg.Logger.Warn("poisoned oversized entry", "stream", c.Orders, "id", id, "bytes", bytes, "limit", s.cfg.MaxEntryBytes)
		Poisoned.Add(ctx, 1, reasonOversized)
	}
	if claim.resent {
		s.cfg.Logger.Warn("the reply of a "+c.mode+" was lost: its entries were handed over by the call made again, without another delivery",
			"stream", c.Orders, "entries", len(entries))
		lostReplies.Add(ctx, 1, lostReplyOf[c.mode])
	}
	msgs := make([]*message.Message, len(entries))
	for i, e := range entries {
		msgs[i] = e.MessageWith(s.cfg.Unmarshaller)
	}
	claim.poisoned = len(poisonedIDs)
	return msgs, claim, err
}

// claimReply is what a fetch reports besides its entries: how many it poisoned, and for a claim where the
// next claim goes on and the pending entries found deleted from the stream.
type claimReply struct {
	poisoned int
	cursor   string
	deleted  []string
	resent   bool // the call was made before: its reply was lost
}

// parseFetch reads fetch.lua's reply {entries (packed: unpackEntries), {{id, bytes}, ...}, cursor,
// {deleted id, ...}, resent} on partition p.
func parseFetch(reply []any, p partition) (entries []Entry, poisoned map[string]int64, claim claimReply, err error) {
	bad := func() error { return fmt.Errorf("redisstream: unexpected fetch reply %.200v", reply) } // on the error paths only
	if len(reply) != 5 {
		return nil, nil, claim, bad()
	}
	claim.resent = reply[4] == int64(1)
	oversized, ok2 := reply[1].([]any)
	claim.cursor, _ = reply[2].(string)
	deleted, ok3 := reply[3].([]any)
	if !ok2 || !ok3 {
		return nil, nil, claim, bad()
	}
	for _, id := range deleted {
		if id, ok := id.(string); ok {
			claim.deleted = append(claim.deleted, id)
		}
	}
	poisoned = parseOversized(oversized)
	switch list := reply[0].(type) {
	case string:
		entries, err = unpackEntries(list)
	case []any: // from a server without cmsgpack
		entries, err = parseEntries(list)
	default:
		err = errUnpack
	}
	if err != nil {
		return nil, poisoned, claim, fmt.Errorf("%w: %w", err, bad())
	}
	for i := range entries {
		entries[i].Partition, entries[i].Partitioned, entries[i].Stream = p.Index, p.Partitioned, p.Orders
	}
	return entries, poisoned, claim, nil
}

// parseOversized reads {{id, bytes}, ...}: the entries fetch.lua poisoned (nil: none).
func parseOversized(list []any) map[string]int64 {
	var poisoned map[string]int64
	for _, p := range list {
		if p, ok := p.([]any); ok && len(p) == 2 {
			if poisoned == nil {
				poisoned = map[string]int64{}
			}
			id, _ := p[0].(string)
			poisoned[id], _ = p[1].(int64)
		}
	}
	return poisoned
}

// parseEntries reads the entries of a server without cmsgpack, the array that unpackEntries reads packed:
// {{id, {field, value, ...}}, ...} or {id, {field, value, ...}, deliveries}.
func parseEntries(list []any) ([]Entry, error) {
	entries := make([]Entry, 0, len(list))
	for _, e := range list {
		parts, _ := e.([]any)
		if len(parts) != 2 && len(parts) != 3 {
			return nil, errUnpack
		}
		id, ok1 := parts[0].(string)
		fields, ok2 := parts[1].([]any)
		entry, ok3 := Entry{ID: id, Deliveries: 1, Values: make(map[string]any, len(fields)/2)}, true
		if len(parts) == 3 {
			entry.Deliveries, ok3 = parts[2].(int64)
		}
		if !ok1 || !ok2 || !ok3 || len(fields)%2 != 0 {
			return nil, errUnpack
		}
		for i := 0; i < len(fields); i += 2 {
			k, _ := fields[i].(string)
			entry.set(k, fields[i+1])
		}
		entries = append(entries, entry)
	}
	return entries, nil
}
