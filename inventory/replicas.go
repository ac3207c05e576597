package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// ackReplyMargin is how much the client's ReadTimeout must exceed the WAIT timeout. go-redis reads the
// script's and WAIT's replies of a pipeline under the client's ReadTimeout (it ignores WAIT's own read
// timeout there), Redis may answer a WAIT up to an event-loop tick late, and go-redis sends a pipeline
// whose read timed out again, script and all: every script survives that (see Resends in the package
// doc), but the call would wait twice and fail on the second read's timeout all the same.
const ackReplyMargin = 500 * time.Millisecond

// WithReplicaAcks makes every stock write (Reserve, ReserveBatch, Release, SetStock, Restock, RaiseFence)
// wait until n replicas of the SKU's master acknowledge it, at most timeout: Redis WAIT n timeout, sent
// right after the script on the same connection, since WAIT counts the replicas that have received the
// writes of its own connection. A call returns nil only once n replicas had received its write and
// everything the master applied before it, also when the call replays an outcome recorded by an earlier
// call: with this option a replay rewrites what it replays as it is, so that it too propagates and its
// WAIT covers the earlier write whatever connection that ran on (Redis 7.2 and later count for WAIT only
// a connection's commands that propagated; 7.0 counts every command). RaiseFence for an unknown SKU
// writes nothing and its WAIT proves nothing. n <= 0, the default, turns it off: no WAIT and no rewrite.
// A timeout below a millisecond is taken as one (WAIT 0 would block forever); it must be at least half a
// second below the client's ReadTimeout (go-redis default 3s), or every write fails before it is sent.
//
// A write that fewer replicas acknowledged in time fails with an error wrapping ErrReplicaAcks, saying how
// many acknowledged. WAIT rolls nothing back: the write stays applied on the master and usually reaches
// the replicas later, unless the master dies first. Calling again is safe for the calls that are
// idempotent: a Reserve, ReserveBatch or Release of the same orders replays their outcomes, and SetStock
// and RaiseFence write the same value again. Restock is not: a second call is a new request and adds the
// quantity again (only go-redis's resend of one call is latched), so read the stock (Get) instead. Every
// such call waits again, for everything up to its own call.
//
// It is not strong consistency. An acknowledgement means the replica received the write into its
// memory, not that it is on disk there. With several replicas and n below their number, a failover may
// promote one that did not acknowledge (Sentinel and Cluster prefer the most up-to-date replica but do
// not promise it), and a write whose WAIT failed may be lost or not. Reads from replicas may still miss
// writes that other replicas acknowledged. A Redis that is a replica refuses WAIT, and the call fails
// with Redis's reason. The client must be a *redis.Client, *redis.ClusterClient or *redis.Ring; through
// a ClusterClient the script runs on the client of the SKU's master, which follows no redirect: while the
// slot is being moved a call is retried for a while (ASK, TRYAGAIN), and once it has moved it is sent to
// the new owner (MOVED reloads the slot map), see ErrSlotMoving.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(s *Store) { s.replicaAcks, s.ackTimeout = max(n, 0), max(timeout, time.Millisecond) }
}

// replayWrites is the scripts' flag that makes a replay write what it replays again (1), so that it
// propagates, when the store waits for replica acks.
func (s *Store) replayWrites() int {
	if s.replicaAcks > 0 {
		return 1
	}
	return 0
}

// eval runs script as script.Run does: EVALSHA, and EVAL after NOSCRIPT, again for a while when a slot
// move kept it from running (retryTryAgain). With replica acks each of those goes in one pipeline with a
// WAIT (the one after a NOSCRIPT waits for nothing in particular: scripts are missing only after a
// restart, failover or SCRIPT FLUSH), and an error of the WAIT replaces the script's reply unless the
// script failed.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return retryTryAgain(ctx, func() *redis.Cmd { return s.evalOnce(ctx, script, keys, args) })
}

// evalOnce is one attempt of eval.
func (s *Store) evalOnce(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	if s.replicaAcks == 0 {
		return script.Run(ctx, s.rdb, keys, args...)
	}
	server, err := s.serverOf(ctx, keys[0])
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	cmd, wait := s.evalWait(ctx, server, script.EvalSha, keys, args)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = s.evalWait(ctx, server, script.Eval, keys, args)
	}
	if c, ok := s.rdb.(*redis.ClusterClient); ok && redis.HasErrorPrefix(cmd.Err(), "MOVED") {
		c.ReloadState(ctx) // the node's client follows no redirect: the next attempt asks the new owner
	}
	if cmd.Err() == nil {
		cmd.SetErr(s.checkAcks(ctx, wait))
	}
	return cmd
}

// serverOf returns the client of the server that holds key, where every key of the call is (they share
// its hash tag), and checks that its ReadTimeout leaves room for the WAIT.
//
// A pipeline on a *redis.Client writes all its commands on one pooled connection and then reads all their
// replies there (go-redis v9.23 baseClient.generalProcessPipeline: one withPipelineConn per attempt; an
// attempt that fails is sent again whole, on a connection from the pool again), so WAIT follows the
// script on the same connection. A *redis.ClusterClient or *redis.Ring pipeline does not keep them
// together: it groups the commands by node after each command's first key (ClusterClient.mapCmdsByNode),
// and WAIT has no key, so the cluster sends it to a master its ShardPicker chooses in turn and the ring to
// a shard of its own. Hence the pipeline goes to the client of the SKU's node.
func (s *Store) serverOf(ctx context.Context, key string) (server *redis.Client, err error) {
	switch c := s.rdb.(type) {
	case *redis.Client:
		server = c
	case *redis.ClusterClient:
		server, err = c.MasterForKey(ctx, key)
	case *redis.Ring:
		server, err = c.GetShardClientForKey(key)
	default:
		return nil, fmt.Errorf("inventory: replica acks need a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("inventory: find the server of %s: %w", key, err)
	}
	if rt := server.Options().ReadTimeout; rt > 0 && s.ackTimeout+ackReplyMargin > rt {
		return nil, fmt.Errorf("inventory: replica ack timeout %v needs a client ReadTimeout of at least %v, not %v",
			s.ackTimeout, s.ackTimeout+ackReplyMargin, rt)
	}
	return server, nil
}

// evalWait sends eval's script command and WAIT in one pipeline on server, so on one connection.
func (s *Store) evalWait(ctx context.Context, server *redis.Client,
	eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, args []any,
) (cmd, wait *redis.Cmd) {
	pipe := server.Pipeline()
	cmd = eval(ctx, pipe, keys, args...)
	wait = pipe.Do(ctx, "wait", s.replicaAcks, s.ackTimeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmd, wait
}

// checkAcks reads WAIT's reply: nil when enough replicas acknowledged, else why not.
func (s *Store) checkAcks(ctx context.Context, wait *redis.Cmd) error {
	acked, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("inventory: WAIT for %d replica acks after the write: %w", s.replicaAcks, err)
	}
	trace.SpanFromContext(ctx).SetAttributes(AttrReplicaAcks.Int64(acked))
	if acked < int64(s.replicaAcks) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged the write within %v (fewer are online, or they lag)",
			ErrReplicaAcks, acked, s.replicaAcks, s.ackTimeout)
	}
	return nil
}
