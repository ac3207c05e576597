package redisstream

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// claims is the state of the claim rounds; only the read loop (readLoop) touches it.
type claims struct {
	due     time.Time // when the next round starts; zero: at once (a subscriber's first round)
	next    int       // the partition the round goes on at; 0: the round is over
	cursors []string  // by partition: where its scan of the pending entries goes on (XAUTOCLAIM's cursor)
}

func newClaims(partitions int) claims {
	c := claims{cursors: make([]string, partitions)}
	for i := range c.cursors {
		c.cursors[i] = "0-0"
	}
	return c
}

// claim claims up to count entries idle longer than ClaimIdle in a round (every ClaimInterval) over every
// partition whose reads work and that this consumer owns (all of them without keyspace events; owners:
// each partition's entries are claimed by its bellOwners owners, so that the claims of idle workers cost
// Redis the same however many workers there are), in one pipeline, count split over them; with fewer places (count) than
// partitions, one each from the next count of them, and the round goes on at the next call. A
// partition's scan goes on from where its last round stopped. Entries found deleted while pending are
// reported. It returns nothing when no round is under way or due, or none was idle.
func (s *reader) claim(ctx context.Context, count int) []*message.Message {
	c := &s.claims
	if c.next == 0 {
		if time.Now().Before(c.due) {
			return nil
		}
		c.due = time.Now().Add(s.cfg.ClaimInterval)
	}
	var parts []partition
	for _, p := range s.cfg.Partitions[c.next:] {
		if !s.skipped(p) && len(parts) < count && (s.bell == nil || s.bell.owns(p.Index)) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		c.next = 0
		return nil // their reads fail: so would the claims
	}
	if c.next = parts[len(parts)-1].Index + 1; c.next == len(s.cfg.Partitions) {
		c.next = 0
	}
	claims := s.calls("claim", parts, count)
	if s.cfg.ShouldClaim != nil {
		if claims = s.choose(ctx, claims); len(claims) == 0 {
			return nil
		}
	}
	pipe := s.rdb.Pipeline()
	for i := range claims {
		claims[i].queue(ctx, pipe, s)
	}
	_, _ = pipe.Exec(ctx) // each partition's error is its own
	var msgs []*message.Message
	for _, r := range claims {
		msgs = append(msgs, s.claimReply(ctx, r)...)
	}
	return msgs
}

// choose narrows a round's claims to the entries ShouldClaim chooses (SubscriberConfig.ShouldClaimPendingMessage,
// as watermill-redisstream asks it): each partition's entries idle longer than ClaimIdle, from its cursor on
// (XPENDING, one pipeline), asked about one by one. A call claims those chosen (fetch.lua's claim of the
// ids given: the same size check and delivery counts as XAUTOCLAIM's) and moves the partition's cursor past those listed;
// a partition with none chosen has its cursor moved here, and no call, unless its last claim failed (made
// again, it hands over what the lost one claimed).
func (s *reader) choose(ctx context.Context, calls []fetchCall) []fetchCall {
	pipe := s.rdb.Pipeline()
	listed := make([]*redis.XPendingExtCmd, len(calls))
	for i, c := range calls {
		listed[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.Orders, Group: s.cfg.Group,
			Idle: s.cfg.ClaimIdle, Start: c.cursor, End: "+", Count: int64(c.count)})
	}
	_, _ = pipe.Exec(ctx)
	chosen := calls[:0]
	for i, c := range calls {
		pending, err := listed[i].Result()
		if err != nil {
			s.logClaimFailure(ctx, c.partition, err)
			continue
		}
		c.cursor = "0-0" // the scan is complete
		if len(pending) == c.count {
			c.cursor = "(" + pending[len(pending)-1].ID
		}
		for _, p := range pending {
			if s.cfg.ShouldClaim(p) {
				c.ids = append(c.ids, p.ID)
			}
		}
		if len(c.ids) == 0 && !s.requests.retried(c) {
			s.claims.cursors[c.Index] = c.cursor
			continue
		}
		chosen = append(chosen, c)
	}
	return chosen
}

// claimReply reads the reply of one partition's claim: its entries, its next cursor, and the entries it
// found deleted.
func (s *reader) claimReply(ctx context.Context, r fetchCall) []*message.Message {
	p := r.partition
	msgs, reply, err := s.reply(ctx, &r)
	if len(reply.deleted) > 0 { // even when the entries could not be read: the claim dropped these for good
		s.cfg.Logger.Error("entries were deleted from the stream before they were decided: their orders are lost",
			"stream", p.Orders, "ids", reply.deleted)
		deletedEntries.Add(ctx, int64(len(reply.deleted)))
	}
	if err != nil {
		s.logClaimFailure(ctx, p, err)
		return nil
	}
	s.claims.cursors[p.Index] = cmp.Or(reply.cursor, "0-0")
	return msgs
}

func (s *reader) logClaimFailure(ctx context.Context, p partition, err error) {
	if ctx.Err() == nil && !redis.HasErrorPrefix(err, "NOGROUP") { // a read creates a lost group again
		s.cfg.Logger.Warn("claiming idle entries failed", "stream", p.Orders, "err", err)
	}
}

// prune deletes idle consumers of the group every PruneInterval, looking at one partition per round, in
// turn from a random one, until ctx ends.
func (s *reader) prune(ctx context.Context) {
	tick := time.NewTicker(s.cfg.PruneInterval)
	defer tick.Stop()
	next := rand.IntN(len(s.cfg.Partitions))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.pruneConsumers(ctx, s.cfg.Partitions[next])
		next = (next + 1) % len(s.cfg.Partitions)
	}
}

// pruneConsumers deletes the consumers of partition p's group that have nothing pending and have been idle
// longer than ConsumerTimeout.
func (s *reader) pruneConsumers(ctx context.Context, p partition) {
	consumers, err := s.rdb.XInfoConsumers(ctx, p.Orders, s.cfg.Group).Result()
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("listing the consumers of the group failed", "stream", p.Orders, "err", err)
		}
		return
	}
	for _, c := range consumers {
		if c.Pending > 0 || c.Idle <= s.cfg.ConsumerTimeout {
			continue
		}
		// Checked again inside Redis: the consumer may have read an entry since.
		outcome, _, err := Group{p.Orders, s.cfg.Group}.PruneConsumer(ctx, s.rdb, c.Name, s.cfg.ConsumerTimeout)
		switch {
		case err != nil:
			s.cfg.Logger.Warn("deleting an idle consumer failed", "stream", p.Orders, "consumer", c.Name, "err", err)
		case outcome == "deleted":
			s.cfg.Logger.Info("deleted an idle consumer from the group", "stream", p.Orders, "consumer", c.Name,
				"idle", c.Idle.String())
		}
	}
}

//go:embed prune_consumer.lua
var pruneLua string
var pruneScript = redis.NewScript(pruneLua)

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
