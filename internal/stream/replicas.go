package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
)

// Replicas is REPLICA_ACKS and REPLICA_ACK_TIMEOUT: how many replicas must have received a write (Redis
// WAIT) before it counts, and how long to wait for them. Acks 0 (the default) waits for none.
type Replicas struct {
	Acks    int
	Timeout time.Duration
}

// DefaultReplicaAckTimeout is REPLICA_ACK_TIMEOUT's default.
const DefaultReplicaAckTimeout = time.Second

// maxReplicaAckTimeout keeps the WAIT well within go-redis's default read timeout (3 s), which applies to
// the WAIT's reply: a read that times out resends the whole pipeline.
const maxReplicaAckTimeout = 2500 * time.Millisecond

// ReplicaFlags defines REPLICA_ACKS and REPLICA_ACK_TIMEOUT on s; writes says which writes they cover.
func ReplicaFlags(s *config.Set, r *Replicas, writes string) {
	s.Int(&r.Acks, "REPLICA_ACKS", 0, "replicas that must have received "+writes+" before it counts (Redis WAIT); 0: none")
	s.Duration(&r.Timeout, "REPLICA_ACK_TIMEOUT", DefaultReplicaAckTimeout, "with REPLICA_ACKS: how long a write waits for its replicas before it fails (and is retried)")
}

// Validate reports a setting that cannot work.
func (r Replicas) Validate() error {
	return errors.Join(
		config.Check(r.Acks >= 0 && r.Acks <= 16, "REPLICA_ACKS", r.Acks, "want 0..16"),
		config.Check(r.Acks == 0 || (r.Timeout >= time.Millisecond && r.Timeout <= maxReplicaAckTimeout), "REPLICA_ACK_TIMEOUT",
			r.Timeout, fmt.Sprintf("want 1ms..%v", maxReplicaAckTimeout)))
}

// ErrReplicaAcks: fewer replicas than REPLICA_ACKS received a write in time.
var ErrReplicaAcks = errors.New("too few replica acks")

// Publishing is rdb for a Watermill publisher whose XADDs each wait for r.Acks replicas: the XADD and a
// WAIT go in one pipeline on a connection to the stream's master (WAIT counts the writes of its own
// connection; a cluster client would send a WAIT, which names no key, to any master), and while too few
// replicas have it the WAIT is repeated there, up to replicaPatience, rather than the entry added again.
// Without acks it is rdb.
func (r Replicas) Publishing(rdb redis.UniversalClient) redis.UniversalClient {
	if r.Acks == 0 {
		return rdb
	}
	return replicated{rdb, r}
}

// replicaPatience is how long an XADD waits for its replicas (a shard whose replica is being replaced)
// before it fails, and the producer adds the order again.
const replicaPatience = 30 * time.Second

type replicated struct {
	redis.UniversalClient
	r Replicas
}

// Unwrap is the client c wraps (redisstream.ServerAttributes names its server on the producer's spans).
func (c replicated) Unwrap() redis.UniversalClient { return c.UniversalClient }

func (c replicated) XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd {
	node, err := masterFor(ctx, c.UniversalClient, a.Stream)
	if err != nil {
		return redis.NewStringResult("", err)
	}
	conn := node.Conn()
	defer conn.Close()
	pipe := conn.Pipeline()
	add := pipe.XAdd(ctx, a)
	wait := pipe.Do(ctx, "wait", c.r.Acks, c.r.Timeout.Milliseconds())
	_, _ = pipe.Exec(ctx)
	deadline := time.Now().Add(replicaPatience)
	for add.Err() == nil {
		n, err := wait.Int()
		switch {
		case err == nil && n >= c.r.Acks:
			return add
		case err != nil || ctx.Err() != nil || time.Now().After(deadline):
			add.SetErr(fmt.Errorf("XADD %s: %w: %d of %d (%v)", a.Stream, ErrReplicaAcks, n, c.r.Acks, err))
			return add
		}
		wait = conn.Do(ctx, "wait", c.r.Acks, c.r.Timeout.Milliseconds())
	}
	return add
}

// masterFor is the client of the server that holds key: rdb itself, or a cluster's master of key's slot.
func masterFor(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("stream: replica acks need a *redis.Client or *redis.ClusterClient, not a %T", rdb)
}
