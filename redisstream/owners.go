package redisstream

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
// that a stalled or busy owner (one reading a backlog is not subscribed) does not leave a partition
// unheard.
const bellOwners = 2

// liveEvery is how often a consumer says it is live and learns which others are: every 5 s, so that 64 idle
// workers cost Redis about 13 calls of live.lua a second (scripts/idle-workers.sh).
const liveEvery = 5 * time.Second

// liveWithin is how long a consumer counts as live after it last said so (every liveEvery), and how long a
// consumer that cannot learn of the others keeps what it saw last before it owns every partition.
const liveWithin = 3 * liveEvery

//go:embed live.lua
var liveLua string
var liveScript = redis.NewScript(liveLua)

// owners says which partitions' events a consumer subscribes to (doorbell): those it owns, by rendezvous
// hashing over the group's live consumers (each partition's bellOwners highest scores of name and
// stream). Until it knows the live consumers, and when it cannot learn them, it owns every partition, as
// every worker did before.
type owners struct {
	rdb      redis.UniversalClient
	self     string
	parts    []partition
	key      string // ConsumersKey
	logger   *slog.Logger
	owned    []atomic.Bool // by partition index
	live     atomic.Int64  // the live consumers it knows of, itself included
	changed  atomic.Bool   // owned changed since the doorbell subscribed
	onChange func()        // owned changed
}

func newOwners(rdb redis.UniversalClient, cfg readerConfig, onChange func()) *owners {
	o := &owners{rdb: rdb, self: cfg.Consumer, parts: cfg.Partitions, key: ConsumersKey(cfg.Partitions[0].Orders, cfg.Group),
		logger: cfg.Logger, owned: make([]atomic.Bool, len(cfg.Partitions)), onChange: func() {}}
	o.see(nil)
	o.onChange = onChange
	return o
}

// see makes the partitions this consumer owns among live, the other live consumers, its own.
func (o *owners) see(live []string) {
	changed := false
	for _, p := range o.parts {
		mine, higher := ownerScore(o.self, p.Orders), 0
		for _, name := range live {
			if name != o.self && ownerScore(name, p.Orders) > mine {
				higher++
			}
		}
		if owned := higher < bellOwners; o.owned[p.Index].Swap(owned) != owned {
			changed = true
		}
	}
	o.live.Store(int64(len(live) + 1))
	if changed {
		o.changed.Store(true)
		o.onChange()
	}
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

// watch says every liveEvery that this consumer is live, and learns which others are, until ctx ends, when
// it takes the consumer out (done is closed then): live.lua on ConsumersKey. (The consumers' idle times
// in the group cannot tell: Redis 7.0 counts an empty read as no interaction.) When it cannot learn them
// for liveWithin, it owns every partition until it can again.
func (o *owners) watch(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	ms := liveWithin.Milliseconds()
	t := time.NewTicker(liveEvery)
	defer t.Stop()
	learnt, failing := time.Now(), false
	for {
		live, err := liveScript.Run(ctx, o.rdb, []string{o.key}, o.self, ms, 0).StringSlice()
		if err == nil {
			o.see(slices.DeleteFunc(live, func(name string) bool { return name == o.self }))
			learnt, failing = time.Now(), false
		} else if ctx.Err() == nil {
			if !failing {
				failing = true
				o.logger.Warn("cannot learn of the other idle consumers: subscribing to the events of every partition "+
					"after "+liveWithin.String(), "key", o.key, "err", err)
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
			_ = liveScript.Run(ctx, o.rdb, []string{o.key}, o.self, ms, 1).Err()
			return
		case <-t.C:
		}
	}
}

// ConsumersKey is the sorted set of the live consumers of group on the partitions whose first stream is
// stream (the key is in that stream's slot): consumer name, scored by when it last said it was live
// (Redis's time, unix ms).
func ConsumersKey(stream, group string) string { return stream + ":consumers:" + group }
