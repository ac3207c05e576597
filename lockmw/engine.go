package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// DefaultLease is the default Config.Lease.
const DefaultLease = 30 * time.Second

// MinLease is the shortest lease accepted: the watchdog must renew within a third of it.
const MinLease = 10 * time.Millisecond

// Config configures a locker. Zero fields take their defaults.
type Config struct {
	// Lease is how long a lock outlives its holder's last renewal. The watchdog renews every Lease/3 while
	// the lock is held, so only a crashed or paused holder lets it expire. Default DefaultLease (30 s).
	Lease time.Duration
	// MaxWait bounds how long Acquire waits for a lock held by another owner. Default 0: until the
	// context is done.
	MaxWait time.Duration
	// NodeTimeout bounds each Redis call of one Redlock attempt, so a slow or stopped master costs at most
	// this much per attempt. Redlock only. Default DefaultNodeTimeout (50 ms).
	NodeTimeout time.Duration
	// Logger receives renewal failures and lost leases. Default slog.Default().
	Logger *slog.Logger
	// TokenTTL, when positive, makes a key's fencing counter expire after this long without a fresh
	// acquisition, so keys that are locked once (a typo, a retired SKU) leave nothing behind for good.
	// Default 0: counters are kept forever, as Redisson keeps them. A counter that expired restarts at 1;
	// a store that refuses the lower token (a stale fence) recovers with RaiseToken. Fencing then only
	// protects against holders paused for less than TokenTTL.
	TokenTTL time.Duration
}

// DefaultNodeTimeout is the default Config.NodeTimeout.
const DefaultNodeTimeout = 50 * time.Millisecond

func (c *Config) setDefaults() {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Lease < MinLease {
		return fmt.Errorf("lockmw: Lease must be at least %v, got %v", MinLease, c.Lease)
	}
	if c.NodeTimeout < 0 {
		return fmt.Errorf("lockmw: NodeTimeout must not be negative, got %v", c.NodeTimeout)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("lockmw: MaxWait must not be negative, got %v", c.MaxWait)
	}
	if c.TokenTTL < 0 {
		return fmt.Errorf("lockmw: TokenTTL must not be negative, got %v", c.TokenTTL)
	}
	return nil
}

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
		lease: cfg.Lease,
		renew: be.renew,
		holds: make(map[holdKey]*hold),
		onRenewError: func(h *hold, err error) {
			cfg.Logger.Warn("lockmw: renewal failed", "lock", h.names.lock, "owner", h.owner, "err", err)
			h.span.RecordError(fmt.Errorf("lock renewal failed: %w", err), trace.WithAttributes(attrKey.String(h.names.lock)))
		},
		onLost: func(h *hold, reason error) {
			cfg.Logger.Error("lockmw: lock lost", "lock", h.names.lock, "owner", h.owner, "reason", reason)
			h.span.RecordError(fmt.Errorf("%w: %w", ErrLockLost, reason), trace.WithAttributes(attrKey.String(h.names.lock)))
			lostCount.Add(context.Background(), 1, e.attrs.mode)
		},
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

func (e *engine) acquire(ctx context.Context, key string, wait bool) (Lease, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	start := time.Now()
	actx, span := e.startAcquire(ctx, key)
	l, err := e.obtain(ctx, actx, key, wait, start)
	e.endAcquire(ctx, span, start, l, err)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

// obtain takes the lock. ctx is the caller's (the lease's context derives from it); actx carries the
// acquisition's span, for the Redis calls made while acquiring.
func (e *engine) obtain(ctx, actx context.Context, key string, wait bool, start time.Time) (*lease, error) {
	owner := e.owner(ctx)
	n := namesFor(key)
	waitCtx := actx
	if wait && e.cfg.MaxWait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(actx, e.cfg.MaxWait,
			fmt.Errorf("lockmw: waited the maximum of %v", e.cfg.MaxWait))
		defer cancel()
	}
	st := AcquireStats{}
	// A reentry never queues (its owner would wait for itself), and a key nobody here waits for is tried
	// at once; otherwise the caller queues behind this process's earlier waiters.
	if !wait || e.dog.get(key, owner) != nil || !e.queue.busy(n.channel) {
		a, err := e.attempt(waitCtx, key, n, owner, &st)
		switch {
		case err != nil:
			return nil, err
		case a.ok:
			return e.newLease(ctx, key, n, owner, a, start, st), nil
		case !wait:
			return nil, errors.Join(ErrNotObtained, a.err)
		}
	}
	return e.wait(ctx, waitCtx, key, n, owner, start, st)
}

// attempt runs one acquire script.
func (e *engine) attempt(ctx context.Context, key string, n names, owner string, st *AcquireStats) (attempt, error) {
	st.Attempts++
	a, err := e.be.acquire(ctx, n, owner, e.dog.get(key, owner) != nil)
	switch {
	case err == nil:
		return a, nil
	case ctx.Err() != nil:
		return attempt{}, notObtained(ctx)
	}
	return attempt{}, fmt.Errorf("lockmw: acquire %s: %w", n.lock, err)
}

// undoTimeout bounds the undo of a failed attempt, which runs even when the caller's context ended.
const undoTimeout = 250 * time.Millisecond

func isNotObtained(err error) bool { return errors.Is(err, ErrNotObtained) }

func notObtained(ctx context.Context) error {
	return errors.Join(ErrNotObtained, ctx.Err(), context.Cause(ctx))
}

// wait queues behind this process's earlier waiters for the key; at the head it attempts whenever an
// unlock message arrives, and otherwise when the holder's lease would run out.
func (e *engine) wait(ctx, waitCtx context.Context, key string, n names, owner string, start time.Time, st AcquireStats) (*lease, error) {
	w, first := e.queue.join(n.channel, owner)
	acquired := false
	readies := make([]<-chan struct{}, 0, len(e.notifiers))
	if first {
		for _, nt := range e.notifiers {
			readies = append(readies, nt.hold(n.channel))
		}
	}
	defer func() {
		if e.queue.leave(n.channel, w, acquired) {
			for _, nt := range e.notifiers {
				nt.drop(n.channel)
			}
		}
	}()
	if first {
		// Attempt only once an unlock message could reach us; else a release between the attempt and
		// the subscription would leave us waiting for the whole lease.
		if err := anyReady(waitCtx, readies); err != nil {
			return nil, err
		}
	}

	var fallback *time.Timer
	defer func() {
		if fallback != nil {
			fallback.Stop()
		}
	}()
	retryIn := e.cfg.Lease
	var lastErr error // why the last attempt failed, when not just another holder
	// After an attempt that gave back part of the lock (Redlock), its own unlock messages arrive at once:
	// an attempt asked for before quietUntil waits until then, a random delay that lets colliding
	// processes fall out of step.
	var quietUntil time.Time
	for {
		head, try := e.queue.turn(n.channel, w)
		if try && time.Now().Before(quietUntil) {
			try = false
			if fallback != nil {
				fallback.Stop()
			}
			fallback = time.NewTimer(time.Until(quietUntil))
		}
		if try {
			a, err := e.attempt(waitCtx, key, n, owner, &st)
			if err != nil {
				return nil, errors.Join(err, lastErr)
			}
			if a.ok {
				acquired = true
				return e.newLease(ctx, key, n, owner, a, start, st), nil
			}
			lastErr = a.err
			retryIn = e.cfg.Lease
			if a.pttl >= 0 {
				retryIn = a.pttl
			}
			if a.quiet {
				quietUntil = time.Now().Add(retryAfterFailure())
			}
			if fallback != nil {
				fallback.Stop()
				fallback = nil
			}
			continue // a message may have arrived during the attempt
		}
		var timeout <-chan time.Time
		if head {
			if fallback == nil {
				fallback = time.NewTimer(jitter(retryIn))
			}
			timeout = fallback.C
		}
		select {
		case <-w.wake:
		case <-timeout:
			fallback = nil
			e.queue.retryLater(w)
		case <-waitCtx.Done():
			return nil, errors.Join(notObtained(waitCtx), lastErr)
		}
	}
}

// jitter spreads fallback retries of waiters in different processes; +0-10 %, at least 1 ms.
func jitter(d time.Duration) time.Duration {
	d += time.Millisecond
	return d + rand.N(d/10+1)
}

// anyReady waits until one of the notifier subscriptions is confirmed, or one second: past that the
// waiter relies on its fallback timer (a notifier whose Redis is down never confirms).
func anyReady(ctx context.Context, readies []<-chan struct{}) error {
	if len(readies) == 0 {
		return nil
	}
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	merged := make(chan struct{}, len(readies))
	stop := make(chan struct{})
	defer close(stop)
	for _, r := range readies {
		go func() {
			select {
			case <-r:
				merged <- struct{}{}
			case <-stop:
			}
		}()
	}
	select {
	case <-merged:
	case <-timeout.C:
	case <-ctx.Done():
		return notObtained(ctx)
	}
	return nil
}

func (e *engine) newLease(ctx context.Context, key string, n names, owner string, a attempt, start time.Time, st AcquireStats) *lease {
	st.Waited = time.Since(start)
	st.Reentry = a.count > 1
	lctx, cancel := context.WithCancelCause(ctx)
	l := &lease{e: e, key: key, ctx: lctx, cancel: cancel, stats: st, acquired: time.Now()}
	e.dog.add(key, n, owner, l, a.token, a.count == 1, a.valid, trace.SpanFromContext(ctx))
	return l
}

// lease is one hold handed to a caller.
type lease struct {
	e        *engine
	key      string
	h        *hold
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stats    AcquireStats
	acquired time.Time
	released atomic.Bool
}

func (l *lease) Key() string              { return l.key }
func (l *lease) Token() int64             { return l.h.token }
func (l *lease) Context() context.Context { return l.ctx }
func (l *lease) Stats() AcquireStats      { return l.stats }

// Release runs the release script, retrying a failed round trip with the same request id: the unlock
// latch makes a retry whose first try did land return that result instead of taking a second reentrant
// hold. (A retry of the last hold's release finds the lock gone; if the same owner took the lock again in
// between, from another goroutine, that retry would release the new hold: owners are meant to be used by
// one goroutine at a time, as the middleware's are.)
func (l *lease) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: lease of %s already released", ErrNotHeld, l.key)
	}
	l.cancel(errReleased)
	holdHist.Record(ctx, time.Since(l.acquired).Seconds(), l.e.attrs.mode)
	// Whatever Redis answers, this process stops renewing first: a release that cannot be confirmed
	// must let the lock expire rather than keep it alive forever, and a renewal racing the release
	// must not report the lock lost.
	if !l.e.dog.done(l.key, l) {
		// The hold was lost and the owner holds the key again: the lock in Redis is the new hold's,
		// which a release by owner id would take away.
		return fmt.Errorf("%w: lease of %s was lost", ErrNotHeld, l.key)
	}

	requestID := l.e.uniqueID()
	var err error
	for try := 0; try < 3; try++ {
		var left int64
		left, err = l.e.be.release(ctx, l.h.names, l.h.owner, requestID)
		if err == nil {
			if left < 0 && try > 0 {
				// An earlier try whose reply was lost freed the lock (the last hold keeps no latch),
				// or it expired meanwhile: either way this hold has ended.
				return nil
			}
			if left < 0 {
				return fmt.Errorf("%w: %s by %s (expired or taken away)", ErrNotHeld, l.h.names.lock, l.h.owner)
			}
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(try+1) * 10 * time.Millisecond)
	}
	return fmt.Errorf("lockmw: release %s: %w", l.h.names.lock, err)
}
