package rlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors. Each is errors.Is-able through whatever wraps it.
var (
	// ErrNotObtained: the lock could not be taken (held by another owner past the wait, or the context
	// ended: then it comes with ctx.Err() and its cause, errors.Is-able too).
	ErrNotObtained = errors.New("rlock: lock not obtained")
	// ErrNotHeld: a release, extension or TTL of a lease whose owner no longer holds the lock (released,
	// expired or taken away). The lock of another owner is never touched.
	ErrNotHeld = errors.New("rlock: lock not held")
	// ErrLockLost is the cause of a lease context cancelled because the lease could not be kept: the
	// watchdog found the lock gone or could not renew it before it expired.
	ErrLockLost = errors.New("rlock: lock lost")
	// ErrInvalidKey: an empty key, one longer than MaxKeyLen, or one with a brace.
	ErrInvalidKey = errors.New("rlock: invalid lock key")
)

// MaxKeyLen is the longest key a locker accepts, in bytes.
const MaxKeyLen = 256

// Locker takes per-key locks. Implementations: Reentrant (one Redis) and Redlock (a majority of independent
// Redis masters); both use the same Redis layout and the same lease contract.
type Locker interface {
	// Acquire takes the lock of key, waiting until it is free, ctx is done or the locker's maximum wait
	// passes. The owner is OwnerFrom(ctx): an owner that already holds key re-enters at once. A lease's
	// Context carries its owner, so an Acquire under it re-enters; without an owner in ctx each call is a
	// new owner.
	Acquire(ctx context.Context, key string) (Lease, error)
	// TryAcquire is Acquire without waiting: one attempt, ErrNotObtained when another owner holds key.
	TryAcquire(ctx context.Context, key string) (Lease, error)
}

// Lease is one hold of a lock. Release it exactly once.
type Lease interface {
	// Key is the key given to Acquire.
	Key() string
	// Token is the fencing token: it strictly increases with every fresh acquisition of the key; a reentry
	// keeps the token of the hold it re-enters. Writers pass it to the store so a holder whose lease was lost
	// cannot overwrite a newer holder's work.
	Token() int64
	// Context is done when the lease is released or lost; when lost, context.Cause is ErrLockLost. Do the
	// guarded work under this context: it carries the lease's owner (OwnerFrom), so acquiring the same key
	// under it re-enters.
	Context() context.Context
	// Release gives up this hold. The lock is freed (and one waiter per process woken) when the owner's last
	// hold is released. ErrNotHeld when the lock expired or was taken away meanwhile.
	Release(ctx context.Context) error
	// Extend makes the lock last at least d from now even if nothing renews it any more (this process
	// stops, or is paused): it confirms in one round trip that the owner still holds the lock and raises the
	// lock's remaining time to d where it is shorter; it never shortens it. ErrNotHeld when the lock was
	// lost, which also ends the lease as lost. The watchdog renews held locks anyway: Extend is for a
	// holder that wants the lock to outlive a stall of up to d, or to confirm it still holds the lock.
	Extend(ctx context.Context, d time.Duration) error
	// TTL returns the lock's remaining time in Redis: how long it would outlive its holder if nothing
	// renewed it from now on (for Redlock: until fewer than a majority of masters hold it). ErrNotHeld when
	// the owner no longer holds the lock, which also ends the lease as lost.
	TTL(ctx context.Context) (time.Duration, error)
}

// AcquireStats says how a lease was obtained, for spans and metrics.
type AcquireStats struct {
	Waited   time.Duration // from the call to Acquire until the lock was held
	Attempts int           // acquire scripts run (0 for a reentry served from the process's own hold)
	Reentry  bool          // the owner already held the key
	HandOff  bool          // handed over by the previous holder in this process, without a Redis call
}

// StatsOf returns how lease was obtained; zero for leases of other Locker implementations.
func StatsOf(lease Lease) AcquireStats {
	if s, ok := lease.(interface{ Stats() AcquireStats }); ok {
		return s.Stats()
	}
	return AcquireStats{}
}

type ownerKey struct{}

// WithOwner returns a context whose acquisitions are made by owner: acquiring a key that owner already holds
// re-enters it. Owners must be unique across processes (for example instance id + message id), and used by
// one goroutine at a time, as a reentrant lock's thread. A lease's Context carries its owner already.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFrom returns the owner set by WithOwner, or "".
func OwnerFrom(ctx context.Context) string {
	owner, _ := ctx.Value(ownerKey{}).(string)
	return owner
}

func validateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %q: want 1-%d bytes, got %d", ErrInvalidKey, truncate(key), MaxKeyLen, len(key))
	}
	// A brace would move the {KEY} hash tag: the lock's keys would land in different Cluster slots.
	if strings.ContainsAny(key, "{}") {
		return fmt.Errorf("%w: %q: braces are not allowed", ErrInvalidKey, truncate(key))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// names are the Redis keys of one lock, in Redisson's naming: a lock named "lock:{K}" has its unlock
// channel at "redisson_lock__channel:lock:{K}" and its fencing counter at "redisson_lock_token:lock:{K}".
// The hash tag {K} keeps them in one Redis Cluster slot (which is why keys may not contain braces).
type names struct {
	lock, channel, token string
}

// TokenKey is the Redis key of the fencing counter of key in the default layout
// ("redisson_lock_token:lock:{key}"), in the slot of the lock: a store on the same Redis can compare a
// writer's token with it (inventory.WithFenceCounter). Config.TokenKey is the same for a Config's KeyPrefix.
func TokenKey(key string) string { return Config{}.TokenKey(key) }

// LockKey is the Redis key of the lock of key in the default layout ("lock:{key}", a hash in Redisson's
// RLock layout): a store on the same Redis can take the lock inside its own script when nobody holds it
// (inventory.WithLockElision). Config.LockKey is the same for a Config's KeyPrefix.
func LockKey(key string) string { return Config{}.LockKey(key) }

// ChannelKey is the pub/sub channel of key's unlock messages in the default layout
// ("redisson_lock__channel:lock:{key}"). Config.ChannelKey is the same for a Config's KeyPrefix.
func ChannelKey(key string) string { return Config{}.ChannelKey(key) }

// TokenKey is the Redis key of the fencing counter of key under c.KeyPrefix.
func (c Config) TokenKey(key string) string {
	return "redisson_lock_token:" + cmp.Or(c.KeyPrefix, DefaultKeyPrefix) + "{" + key + "}"
}

// LockKey is the Redis key of the lock of key under c.KeyPrefix (KeyPrefix + "{key}").
func (c Config) LockKey(key string) string {
	return cmp.Or(c.KeyPrefix, DefaultKeyPrefix) + "{" + key + "}"
}

// ChannelKey is the pub/sub channel of key's unlock messages under c.KeyPrefix.
func (c Config) ChannelKey(key string) string { return c.names(key).channel }

// names are key's lock, channel and counter under c.KeyPrefix, by Redisson's rule from the lock's name.
func (c Config) names(key string) names {
	lock := c.LockKey(key)
	return names{lock: lock, channel: "redisson_lock__channel:" + lock, token: "redisson_lock_token:" + lock}
}

// latch names the latch of one request on the lock: a release's (Redisson's redisson_unlock_latch), and in
// the same form (request ids are unique) an acquisition's, an undo's and a force release's.
func (n names) latch(requestID string) string {
	return "redisson_unlock_latch:" + n.lock + ":" + requestID
}
