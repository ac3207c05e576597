package rlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// acquisition is one call of Acquire or TryAcquire, from the call until the lock is held or given up.
type acquisition struct {
	e   *engine
	ctx context.Context // the caller's: the lease's context derives from it
	// spanCtx is ctx with the acquisition's span: the wait is recorded under it, so an exemplar of the
	// wait histogram points at this span.
	spanCtx context.Context
	// waitCtx is spanCtx ended at Config.MaxWait; the Redis calls made while acquiring use it.
	waitCtx context.Context
	cancel  context.CancelFunc // releases waitCtx
	span    trace.Span
	key     string
	names   names
	owner   string
	wait    bool // Acquire, not TryAcquire
	start   time.Time
	stats   AcquireStats
}

func (e *engine) acquire(ctx context.Context, key string, wait bool) (Lease, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	a := e.begin(ctx, key, wait)
	l, err := a.obtain()
	a.end(l, err)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

// begin starts the acquisition of key by the owner in ctx, and its span.
func (e *engine) begin(ctx context.Context, key string, wait bool) *acquisition {
	a := &acquisition{e: e, ctx: ctx, key: key, names: e.cfg.names(key), wait: wait, start: time.Now()}
	a.spanCtx, a.span = e.startAcquire(ctx, key)
	a.owner = e.owner(ctx)
	a.waitCtx, a.cancel = e.boundWait(a.spanCtx, wait)
	return a
}

// boundWait bounds the wait of Acquire by Config.MaxWait and by the context's WithWaitDeadline.
func (e *engine) boundWait(ctx context.Context, wait bool) (context.Context, context.CancelFunc) {
	if until, ok := ctx.Value(waitDeadlineKey{}).(time.Time); ok && wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, until, errWaitDeadline)
		inner, innerCancel := e.boundWait(context.WithValue(ctx, waitDeadlineKey{}, nil), wait)
		return inner, func() { innerCancel(); cancel() }
	}
	if !wait || e.cfg.MaxWait <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, e.cfg.MaxWait,
		fmt.Errorf("waited the maximum of %v: %w", e.cfg.MaxWait, context.DeadlineExceeded))
}

type waitDeadlineKey struct{}

var errWaitDeadline = fmt.Errorf("waited until the deadline of the set: %w", context.DeadlineExceeded)

// WithWaitDeadline returns a context under which Acquire waits until t at most (and Config.MaxWait at
// most, as always). Unlike a context deadline, it does not end the leases obtained under it (a lease's
// context derives from its acquisition's): it bounds one wait shared by several acquisitions, as
// AcquireAll's.
func WithWaitDeadline(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, waitDeadlineKey{}, t)
}

// end releases the wait bound and records the outcome.
func (a *acquisition) end(l *lease, err error) {
	a.cancel()
	a.endAcquire(l, err)
}

// obtain takes the lock: at once when it can, else after queueing behind this process's earlier waiters.
func (a *acquisition) obtain() (*lease, error) {
	if !a.skipsQueue() {
		return a.waitInQueue()
	}
	res, err := a.try()
	switch {
	case err != nil:
		return nil, err
	case res.ok:
		return a.newLease(res), nil
	case !a.wait:
		return nil, join(ErrNotObtained, res.err)
	}
	return a.waitInQueue()
}

// skipsQueue: a try never waits, a reentry never queues (its owner would wait for itself), and a key nobody
// here holds or waits for is tried at once; otherwise the caller queues behind this process's earlier
// waiters.
func (a *acquisition) skipsQueue() bool {
	owner, _, taken, held := a.e.dog.holder(a.key)
	return !a.wait || (taken && owner == a.owner) || (!held && !a.e.queue.busy(a.names.channel))
}

// try runs one acquire script: a reentry, when the owner holds the key here (under the hold's owner id in
// Redis); otherwise a fresh attempt, which a hold here would only refuse: another owner's, or one just
// handed to this waiter, which its queue's next turn hands over (a reentry in Redis would count a hold that
// no release takes back).
func (a *acquisition) try() (attempt, error) {
	redisOwner, held := a.owner, false
	switch owner, holdsIn, taken, ok := a.e.dog.holder(a.key); {
	case taken && owner == a.owner:
		redisOwner, held = holdsIn, true
	case ok:
		return attempt{pttl: -1}, nil
	}
	a.stats.Attempts++
	req := request{n: a.names, owner: redisOwner, id: a.e.uniqueID(), held: held}
	res, err := a.e.be.acquire(a.waitCtx, req)
	switch {
	case err == nil:
		res.redisOwner = redisOwner
		return res, nil
	case a.waitCtx.Err() != nil:
		return attempt{}, notObtained(a.waitCtx)
	}
	return attempt{}, join(fmt.Errorf("rlock: acquire %s", a.key), err)
}

// newLease hands out the lease of a successful attempt, kept alive by the watchdog.
func (a *acquisition) newLease(res attempt) *lease {
	a.stats.Reentry = res.count > 1
	l := a.lease()
	l.h = &hold{key: a.key, names: a.names, redisOwner: res.redisOwner, owner: a.owner, token: res.token,
		leases: []*lease{l}, valid: res.valid, since: time.Now(), span: trace.SpanFromContext(a.ctx)}
	a.e.dog.add(l, res.count == 1)
	return l
}

// takeHandOff makes the lease of hold h, handed to this waiter by its last holder here; nil when h was
// lost meanwhile. A hold lost while handed over has no lease whose release would free it in Redis, where it
// may still be held (its renewals timed out but landed): it is released there before the waiter tries.
func (a *acquisition) takeHandOff(h *hold) *lease {
	a.stats.HandOff = true
	l := a.lease()
	if !a.e.dog.take(h, l) {
		a.stats.HandOff = false
		l.cancel(ErrLockLost)
		if _, redisOwner, _, held := a.e.dog.holder(a.key); !held || redisOwner != h.redisOwner {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), undoTimeout)
			defer cancel()
			_ = a.e.releaseHold(ctx, h, a.e.newUnlock(h))
		}
		return nil
	}
	return l
}

// lease makes the lease of this acquisition, without its hold. Its context carries the owner, so an
// acquisition under it re-enters, and not the WithWaitDeadline of the acquisition.
func (a *acquisition) lease() *lease {
	a.stats.Waited = time.Since(a.start)
	ctx := a.ctx
	if OwnerFrom(ctx) != a.owner {
		ctx = WithOwner(ctx, a.owner)
	}
	if _, ok := ctx.Value(waitDeadlineKey{}).(time.Time); ok {
		// The wait it bounded is over: an Acquire under the lease waits as any other.
		ctx = context.WithValue(ctx, waitDeadlineKey{}, nil)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	return &lease{e: a.e, key: a.key, ctx: lctx, cancel: cancel, stats: a.stats, acquired: time.Now()}
}

func isNotObtained(err error) bool { return errors.Is(err, ErrNotObtained) }

// notObtained is the error of an acquisition whose wait ended: ctx's error and its cause, each said once.
func notObtained(ctx context.Context) error {
	return join(ErrNotObtained, ctx.Err(), context.Cause(ctx))
}
