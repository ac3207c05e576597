package lockmw

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// backend runs the lock scripts: on one Redis (Reentrant) or on a quorum of independent ones (Redlock).
type backend interface {
	// acquire runs one attempt. On failure it leaves nothing behind, as far as it can tell: an attempt
	// whose outcome is unknown (cut off, no reply) is undone, except where owner already held the lock
	// (held), whose count must not be touched.
	acquire(ctx context.Context, n names, owner string, held bool) (attempt, error)
	// release returns the holds left for owner, or -1 when owner does not hold the lock.
	release(ctx context.Context, n names, owner, requestID string) (int64, error)
	// renew returns per hold: nil (renewed), ErrNotHeld (gone) or another error (outcome unknown).
	renew(ctx context.Context, hs []*hold) []error
	// raiseToken raises the fencing counter of n to at least token.
	raiseToken(ctx context.Context, n names, token int64) error
}

// attempt is the outcome of one run of the acquire script (on a quorum, for Redlock).
type attempt struct {
	ok    bool
	token int64
	count int64         // holds of the owner after the attempt; 1 is a fresh acquisition, more a reentry
	valid time.Time     // ok: the lease is safe until then (attempt start + lease - drift - elapsed)
	pttl  time.Duration // !ok: when to try again at the latest (the holder's remaining lease); < 0 unknown
	err   error         // !ok: why, when it was not just another holder (Redlock: no quorum)
	// quiet: the attempt took and gave back part of the lock (Redlock minority), publishing unlock messages
	// that would wake the waiters at once; they wait pttl instead, or they would collide again.
	quiet bool
}

// engine is what both lockers share: owners, the local wait queue, unlock notifications and the watchdog.
type engine struct {
	mode      string // reentrant | redlock, for spans and metrics
	attrs     metricAttrs
	cfg       Config
	be        backend
	instance  string
	seq       atomic.Uint64
	queue     *waitQueue
	notifiers []*notifier
	dog       *watchdog
}

func newEngine(mode string, cfg Config, be backend) *engine {
	e := &engine{mode: mode, attrs: newMetricAttrs(mode), cfg: cfg, be: be, instance: uuid.NewString(), queue: newWaitQueue()}
	e.dog = &watchdog{
		lease:        cfg.Lease,
		renew:        be.renew,
		holds:        make(map[holdKey]*hold),
		onRenewError: e.renewalFailed,
		onLost:       e.lockLost,
	}
	return e
}

// owner returns the owner of an acquisition: the one in ctx, or a new one (instance id plus a counter, as
// Redisson's "uuid:threadId").
func (e *engine) owner(ctx context.Context) string {
	if o := OwnerFrom(ctx); o != "" {
		return o
	}
	return e.uniqueID()
}

// uniqueID is unique across processes without a syscall (unlike a random UUID per call).
func (e *engine) uniqueID() string { return e.instance + ":" + strconv.FormatUint(e.seq.Add(1), 10) }

func (e *engine) Acquire(ctx context.Context, key string) (Lease, error) {
	return e.acquire(ctx, key, true)
}

func (e *engine) TryAcquire(ctx context.Context, key string) (Lease, error) {
	return e.acquire(ctx, key, false)
}

// RaiseToken raises the fencing counter of key to at least token (never lowers it), so the next fresh
// acquisition gets a larger token. A store that refused a token as stale because its stored fence is
// ahead of the counter (the counter was lost: a restart without persistence, eviction, an operator, or
// Config.TokenTTL) calls it with the stored fence: the next holder then writes again after one retry.
// Raising never weakens fencing: tokens only grow.
func (e *engine) RaiseToken(ctx context.Context, key string, token int64) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := e.be.raiseToken(ctx, namesFor(key), token); err != nil {
		return fmt.Errorf("lockmw: raise fencing counter of %s: %w", key, err)
	}
	return nil
}
