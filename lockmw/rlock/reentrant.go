package rlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reentrant is the lock on a single Redis (or a Redis Cluster: all keys of a lock share one slot), in the
// layout of Redisson's RLock, so Redisson clients and Reentrant exclude each other.
type Reentrant struct {
	e    *engine
	node singleNode
}

var _ Locker = (*Reentrant)(nil)

// NewReentrant returns a locker on rdb: a *redis.Client, or a *redis.ClusterClient (each lock's keys share
// one slot), whose unlock messages are then sharded (Config.ShardedPubSub). It opens one pub/sub
// connection for unlock messages, or with sharded messages on a cluster one per key with waiters; Close
// them. The client should honour context deadlines (redis.Options.ContextTimeoutEnabled), or a stalled
// Redis holds acquisitions past their context. A cluster client should reload its slot map often
// (redis.ClusterOptions.ClusterStateReloadInterval): go-redis reloads it on a MOVED reply, which a dead
// master does not send, so by default it keeps calling a master for a minute after its replica took over.
func NewReentrant(rdb redis.UniversalClient, cfg Config) (*Reentrant, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	sharded := cfg.ShardedPubSub.on(rdb)
	node := singleNode{scripts: newScripts(cfg, sharded), rdb: rdb, run: newRunner(rdb)}
	e, err := newEngine("reentrant", cfg, node)
	if err != nil {
		return nil, err
	}
	e.notifiers = []*notifier{startNotifier(rdb, sharded, e.queue.notify)}
	return &Reentrant{e: e, node: node}, nil
}

// Acquire takes the lock of key, waiting until it is free, ctx is done or Config.MaxWait passes. The owner
// is OwnerFrom(ctx), which a lease's Context carries: an owner that already holds key re-enters at once,
// keeping its token. Without an owner each call is a new owner. A failure wraps ErrNotObtained (with
// ctx.Err() when the wait ended), ErrInvalidKey, or the error of the Redis call.
func (r *Reentrant) Acquire(ctx context.Context, key string) (Lease, error) {
	return r.e.acquire(ctx, key, true)
}

// TryAcquire is Acquire without waiting: one attempt, ErrNotObtained when another owner holds key.
func (r *Reentrant) TryAcquire(ctx context.Context, key string) (Lease, error) {
	return r.e.acquire(ctx, key, false)
}

// RaiseToken raises the fencing counter of key to at least token (never lowers it), so the next fresh
// acquisition gets a larger token. A store that refused a token as stale because its stored fence is
// ahead of the counter (the counter was lost: a restart without persistence, eviction, an operator, or
// Config.TokenTTL) calls it with the stored fence: the next holder then writes again after one retry.
// Raising never weakens fencing: tokens only grow.
func (r *Reentrant) RaiseToken(ctx context.Context, key string, token int64) error {
	return r.e.raiseToken(ctx, key, token)
}

// Close closes the pub/sub connection; the Redis client stays open. Held leases keep being renewed until
// released.
func (r *Reentrant) Close() error { return r.e.notifiers[0].close() }

// State is a lock as Redis holds it.
type State struct {
	Owner     string        // "" when the lock is free
	Holds     int64         // reentry count of Owner
	Remaining time.Duration // lease left
}

// Inspect returns the current holder of key, its hold count and remaining lease.
func (r *Reentrant) Inspect(ctx context.Context, key string) (State, error) {
	if err := validateKey(key); err != nil {
		return State{}, err
	}
	n := r.e.cfg.names(key)
	pipe := r.node.rdb.TxPipeline() // owner and lease from the same moment
	all := pipe.HGetAll(ctx, n.lock)
	ttl := pipe.PTTL(ctx, n.lock)
	if _, err := pipe.Exec(ctx); err != nil {
		return State{}, fmt.Errorf("rlock: inspect %s: %w", n.lock, err)
	}
	var st State
	for owner, count := range all.Val() {
		st.Owner = owner
		st.Holds, _ = strconv.ParseInt(count, 10, 64)
	}
	if st.Owner != "" {
		st.Remaining = ttl.Val()
	}
	return st, nil
}

// ForceRelease deletes the lock of key whoever holds it and wakes its waiters, for operators clearing a
// stuck lock. Its holder's next renewal finds it gone and cancels its lease. Reports whether a lock existed.
func (r *Reentrant) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := validateKey(key); err != nil {
		return false, err
	}
	n := r.e.cfg.names(key)
	deleted, err := r.node.runForceRelease(ctx, r.node.rdb, n, r.e.uniqueID())
	if err != nil {
		return false, fmt.Errorf("rlock: force release %s: %w", n.lock, err)
	}
	return deleted, nil
}

// singleNode runs the lock scripts on one Redis.
type singleNode struct {
	scripts
	rdb redis.UniversalClient
	run runner // the acquire and release scripts: concurrent callers share round trips on one server
}

// undoTimeout bounds the undo of a failed attempt, which runs even when the caller's context ended.
const undoTimeout = 250 * time.Millisecond

func (s singleNode) raiseToken(ctx context.Context, n names, token int64) error {
	return s.runRaiseToken(ctx, s.rdb, n, token)
}

func (s singleNode) acquire(ctx context.Context, req request) (attempt, error) {
	start := time.Now()
	res, err := s.runAcquire(ctx, s.run, req)
	if err != nil { // the script may have run before the reply was lost or the context ended
		s.undo(ctx, req)
		return attempt{}, err
	}
	a, err := parseAttempt(res)
	if err != nil || !a.ok {
		return a, err
	}
	a.valid = start.Add(s.lease - drift(s.lease))
	if !time.Now().Before(a.valid) && a.count == 1 { // the round trip outlasted the lease
		s.undo(ctx, req)
		return attempt{err: fmt.Errorf("the acquisition took longer than the lease %v", s.lease)}, nil
	}
	return a, nil
}

// undo takes back what acquisition request req may have done, before the caller can try again with the
// same owner. By the request's latch: it may reach Redis before the request itself, which then does
// nothing.
func (s singleNode) undo(ctx context.Context, req request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	_ = s.runUndo(ctx, s.run, req)
}

func (s singleNode) release(ctx context.Context, req *unlock) (releaseReply, error) {
	return s.runRelease(ctx, s.run, req, releaseKeys(req), 0)
}

func (s singleNode) servers() int { return 1 }

func (s singleNode) renew(ctx context.Context, hs []*hold, lease time.Duration) []error {
	return renewAll(ctx, s.rdb, hs, lease)
}

func (s singleNode) ttl(ctx context.Context, n names, owner string) (time.Duration, error) {
	ttl, err := runTTL(ctx, s.rdb, n, owner)
	if err == nil && ttl < 0 {
		return 0, ErrNotHeld
	}
	return ttl, err
}
