package stream

import (
	"context"
	_ "embed"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// bellOwners is how many live consumers own a partition's keyspace events (doorbell): more than one, so
// that a stalled or busy owner (one reading a backlog is not subscribed) does not leave a partition unread
// until another worker's next read.
const bellOwners = 2

// liveWithin is how long a consumer counts as live after it last said so (every idlePoll), and how long a
// consumer that cannot learn of the others keeps what it saw last before it answers every event.
const liveWithin = 5 * idlePoll

//go:embed live.lua
var liveLua string
var liveScript = redis.NewScript(liveLua)

// owners says which partitions' events a consumer answers at once: those it owns, by rendezvous hashing
// over the group's live consumers (each partition's bellOwners highest scores of name and stream), and one
// in every few of the others'. Until it knows the live consumers, and when it cannot learn them, it
// answers every event, as every worker did before.
type owners struct {
	self  string
	parts []Partition
	owned []atomic.Bool   // by partition index
	seen  []atomic.Uint32 // by partition index: events of an unowned partition
	every atomic.Uint32   // answers one in every so many events of a partition it does not own
}

func newOwners(self string, parts []Partition) *owners {
	o := &owners{self: self, parts: parts, owned: make([]atomic.Bool, len(parts)), seen: make([]atomic.Uint32, len(parts))}
	for _, p := range parts { // each consumer's own phase: the others do not answer the same event together
		o.seen[p.Index].Store(uint32(ownerScore(self, p.Orders)))
	}
	o.see(nil)
	return o
}

// answers says whether an event of partition i is to be read now.
func (o *owners) answers(i int) bool {
	return o.owned[i].Load() || o.seen[i].Add(1)%o.every.Load() == 0
}

// see makes the partitions this consumer owns among live, the other live consumers, its own.
func (o *owners) see(live []string) {
	for _, p := range o.parts {
		mine, higher := ownerScore(o.self, p.Orders), 0
		for _, name := range live {
			if name != o.self && ownerScore(name, p.Orders) > mine {
				higher++
			}
		}
		o.owned[p.Index].Store(higher < bellOwners)
	}
	// The others' events answered: about half a read an event among all of them, so that a backlog
	// larger than the owners take brings in the rest within a few events.
	o.every.Store(uint32(max(1, 2*(len(live)+1-bellOwners))))
}

// ownerScore is consumer name's rendezvous score for stream: FNV-1a, whose high bits names that differ
// only at their end (w1, w2, ...) barely change, mixed by MurmurHash3's finalizer.
func ownerScore(name, stream string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(stream))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// watch says every idlePoll that this consumer is live, and learns which others are, until ctx ends, when
// it takes the consumer out (done is closed then): live.lua on ConsumersKey. (The consumers' idle times
// in the group cannot tell: Redis 7.0 counts an empty read as no interaction.) When it cannot learn them
// for liveWithin, it answers every event until it can again.
func (o *owners) watch(ctx context.Context, rdb redis.UniversalClient, stream, group string, logger *slog.Logger, done chan<- struct{}) {
	defer close(done)
	key, ms := ConsumersKey(stream, group), liveWithin.Milliseconds()
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	learnt, failing := time.Now(), false
	for {
		live, err := liveScript.Run(ctx, rdb, []string{key}, o.self, ms, 0).StringSlice()
		if err == nil {
			o.see(slices.DeleteFunc(live, func(name string) bool { return name == o.self }))
			learnt, failing = time.Now(), false
		} else if ctx.Err() == nil {
			if !failing {
				failing = true
				logger.Warn("cannot learn of the other idle consumers: answering the events of every partition "+
					"after "+liveWithin.String(), "key", key, "err", err)
			}
			if time.Since(learnt) >= liveWithin {
				o.see(nil)
			}
		}
		select {
		case <-ctx.Done():
			// Gone: the others count this consumer out at their next look rather than liveWithin later.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = liveScript.Run(ctx, rdb, []string{key}, o.self, ms, 1).Err()
			return
		case <-t.C:
		}
	}
}

// ConsumersKey is the sorted set of the live consumers of group on the partitions whose first stream is
// stream (the key is in that stream's slot): consumer name, scored by when it last said it was live
// (Redis's time, unix ms).
func ConsumersKey(stream, group string) string { return stream + ":consumers:" + group }
