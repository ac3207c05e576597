package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// A locker is one lock implementation under test as one process holds it: its own Redis clients and,
// for stockflow, its own local wait queue and unlock subscription.
type locker interface {
	// lock takes key, waiting as the implementation does, and returns the function that releases it.
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	close()
}

// A contender names an implementation and makes its lockers over one or more Redis servers.
type contender struct {
	name string
	new  func(addrs []string) (locker, error)
	// limit marks the physical-limit baseline: two bare round trips that exclude nothing.
	limit bool
}

// peerTTL is the lock expiry given to the peers without a watchdog: redsync's default expiry.
const peerTTL = 8 * time.Second

func stockflowReentrant() contender {
	return contender{name: "stockflow", new: func(addrs []string) (locker, error) {
		rdb := newClient(addrs[0])
		l, err := rlock.NewReentrant(rdb, rlock.Config{})
		if err != nil {
			return nil, err
		}
		return &rlockLocker{l: l, closeL: l.Close, clients: []*redis.Client{rdb}}, nil
	}}
}

func stockflowRedlock() contender {
	return contender{name: "stockflow", new: func(addrs []string) (locker, error) {
		clients := newClients(addrs)
		universal := make([]redis.UniversalClient, len(clients))
		for i, c := range clients {
			universal[i] = c
		}
		l, err := rlock.NewRedlock(universal, rlock.Config{})
		if err != nil {
			return nil, err
		}
		return &rlockLocker{l: l, closeL: l.Close, clients: clients}, nil
	}}
}

type rlockLocker struct {
	l       rlock.Locker
	closeL  func() error
	clients []*redis.Client
}

func (s *rlockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lease, err := s.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

func (s *rlockLocker) close() { _ = s.closeL(); closeAll(s.clients) }

// redsyncDefaults is redsync with its documented defaults (8 s expiry, 32 tries, 50-250 ms between them),
// over one pool per address (Redlock when there are several).
func redsyncDefaults() contender {
	return contender{name: "redsync", new: func(addrs []string) (locker, error) {
		clients := newClients(addrs)
		pools := make([]redsyncredis.Pool, len(clients))
		for i, c := range clients {
			pools[i] = goredis.NewPool(c)
		}
		return &redsyncLocker{rs: redsync.New(pools...), clients: clients}, nil
	}}
}

type redsyncLocker struct {
	rs      *redsync.Redsync
	clients []*redis.Client
}

func (r *redsyncLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock found the mutex taken")
		}
		return err
	}, nil
}

func (r *redsyncLocker) close() { closeAll(r.clients) }

// redislockRetry is bsm/redislock with a LinearBackoff retry strategy; 0 is its default (no retry).
func redislockRetry(backoff time.Duration) contender {
	name := "redislock"
	if backoff > 0 {
		name = fmt.Sprintf("redislock %v", backoff)
	}
	return contender{name: name, new: func(addrs []string) (locker, error) {
		rdb := newClient(addrs[0])
		var opts *redislock.Options
		if backoff > 0 {
			opts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(backoff)}
		}
		return &redislockLocker{c: redislock.New(rdb), opts: opts, rdb: rdb}, nil
	}}
}

type redislockLocker struct {
	c    *redislock.Client
	opts *redislock.Options
	rdb  *redis.Client
}

func (r *redislockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, key, peerTTL, r.opts)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (r *redislockLocker) close() { _ = r.rdb.Close() }

// naiveSpin is the lock many services write first: SET NX with an expiry, and on failure sleep and try
// again; DEL to unlock.
func naiveSpin(sleep time.Duration) contender {
	return contender{name: fmt.Sprintf("naive SETNX %v", sleep), new: func(addrs []string) (locker, error) {
		return &naiveLocker{rdb: newClient(addrs[0]), sleep: sleep}, nil
	}}
}

type naiveLocker struct {
	rdb   *redis.Client
	sleep time.Duration
}

func (n *naiveLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		ok, err := n.rdb.SetNX(ctx, key, "1", peerTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error { return n.rdb.Del(ctx, key).Err() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(n.sleep):
		}
	}
}

func (n *naiveLocker) close() { _ = n.rdb.Close() }

// twoEvalSha is the physical limit of a lock that needs one script to take and one to give back: two
// bare EVALSHA round trips of a one-command script on the same kind of client. It excludes nothing.
func twoEvalSha() contender {
	return contender{name: physicalLimit, limit: true, new: func(addrs []string) (locker, error) {
		rdb := newClient(addrs[0])
		if err := hincrby.Load(context.Background(), rdb).Err(); err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &evalShaLocker{rdb: rdb}, nil
	}}
}

const physicalLimit = "physical limit (2 x EVALSHA)"

var hincrby = redis.NewScript(`return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)`)

type evalShaLocker struct{ rdb *redis.Client }

func (e *evalShaLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	keys := []string{key}
	if err := hincrby.EvalSha(ctx, e.rdb, keys, "f").Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return hincrby.EvalSha(ctx, e.rdb, keys, "f").Err() }, nil
}

func (e *evalShaLocker) close() { _ = e.rdb.Close() }

// redissonScripts is Redisson's own RLock cycle sent bare (tryLockInnerAsync's and unlockInnerAsync's
// scripts, as a Java service runs them, with a fresh unlock latch per release): the Redis cost of the
// layout stockflow's lock shares, without a watchdog, a fencing token or a wait. It retries a taken lock
// after 1 ms; the comparisons that run it take uncontended keys.
func redissonScripts() contender {
	return contender{name: redissonName, new: func(addrs []string) (locker, error) {
		rdb := newClient(addrs[0])
		for _, s := range []*redis.Script{redissonLock, redissonUnlock} {
			if err := s.Load(context.Background(), rdb).Err(); err != nil {
				_ = rdb.Close()
				return nil, err
			}
		}
		return &redissonLocker{rdb: rdb}, nil
	}}
}

const redissonName = "Redisson's scripts (bare)"

var (
	redissonLock = redis.NewScript(`if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);`)
	redissonUnlock = redis.NewScript(`local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0;
else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;`)
)

type redissonLocker struct {
	rdb *redis.Client
	req atomic.Int64 // unlock request ids
}

// redissonOwner is an owner id as Redisson writes one: the client's UUID and the thread's id.
const redissonOwner = "8743c9c0-0795-4907-87fd-6c719a6b4586:1"

func (r *redissonLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lockKey := "{" + key + "}"
	for {
		err := redissonLock.EvalSha(ctx, r.rdb, []string{lockKey}, peerTTL.Milliseconds(), redissonOwner).Err()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return func(ctx context.Context) error {
		keys := []string{lockKey, "redisson_lock__channel:" + lockKey,
			"redisson_unlock_latch:" + lockKey + ":" + strconv.FormatInt(r.req.Add(1), 10)}
		return redissonUnlock.EvalSha(ctx, r.rdb, keys, 0, peerTTL.Milliseconds(), redissonOwner, "publish", 10000).Err()
	}, nil
}

func (r *redissonLocker) close() { _ = r.rdb.Close() }

// noLock takes nothing: the smoke test uses it to prove the counter check catches a lock that does not
// exclude.
func noLock() contender {
	return contender{name: "no lock", new: func([]string) (locker, error) { return noLocker{}, nil }}
}

type noLocker struct{}

func (noLocker) lock(context.Context, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}
func (noLocker) close() {}
