// Package redsynclock adapts go-redsync/redsync to rlock.Locker, so the worker can run with redsync's
// mutex in place of stockflow's lock (the end-to-end comparison of the bench harness).
//
// It keeps redsync's behaviour and defaults (8 s expiry, 32 tries 50-250 ms apart): no reentrancy, no
// watchdog, no fencing (Token is 0, which the stock script treats as unfenced), no unlock notification.
package redsynclock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Locker takes redsync mutexes named "redsync:lock:{key}".
type Locker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

var _ rlock.Locker = (*Locker)(nil)

// New returns a Locker over rs; opts are passed to every mutex (none: redsync's defaults).
func New(rs *redsync.Redsync, opts ...redsync.Option) *Locker { return &Locker{rs: rs, opts: opts} }

// Acquire locks key, retrying as redsync does, until it holds the mutex, its tries are used up or ctx
// ends: then the error wraps rlock.ErrNotObtained.
func (l *Locker) Acquire(ctx context.Context, key string) (rlock.Lease, error) {
	return l.acquire(ctx, key, false)
}

// TryAcquire is one attempt.
func (l *Locker) TryAcquire(ctx context.Context, key string) (rlock.Lease, error) {
	return l.acquire(ctx, key, true)
}

func (l *Locker) acquire(ctx context.Context, key string, once bool) (rlock.Lease, error) {
	start := time.Now()
	m := l.rs.NewMutex("redsync:lock:{"+key+"}", l.opts...)
	lock := m.LockContext
	if once {
		lock = m.TryLockContext
	}
	if err := lock(ctx); err != nil {
		return nil, fmt.Errorf("%w: redsync %s: %w", rlock.ErrNotObtained, key, errors.Join(err, ctx.Err()))
	}
	// The lease context ends when the mutex's validity does: redsync has no watchdog.
	lctx, cancel := context.WithDeadline(ctx, m.Until())
	return &lease{key: key, m: m, ctx: lctx, cancel: cancel, waited: time.Since(start)}, nil
}

type lease struct {
	key    string
	m      *redsync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	waited time.Duration
}

func (l *lease) Key() string              { return l.key }
func (l *lease) Token() int64             { return 0 }
func (l *lease) Context() context.Context { return l.ctx }

// Stats makes rlock.StatsOf report the wait, so outcome events carry lock_wait_ms as with stockflow.
func (l *lease) Stats() rlock.AcquireStats { return rlock.AcquireStats{Waited: l.waited} }

// Extend is not offered (errors.ErrUnsupported): redsync's Extend resets the mutex's expiry, but the lease's
// context keeps the deadline of the acquisition.
func (l *lease) Extend(context.Context, time.Duration) error { return errors.ErrUnsupported }

// TTL is the mutex's validity by the local clock (redsync's Until).
func (l *lease) TTL(context.Context) (time.Duration, error) { return time.Until(l.m.Until()), nil }

func (l *lease) Release(ctx context.Context) error {
	l.cancel()
	ok, err := l.m.UnlockContext(ctx)
	switch {
	case errors.Is(err, redsync.ErrLockAlreadyExpired) || (err == nil && !ok):
		return fmt.Errorf("%w: redsync %s", rlock.ErrNotHeld, l.key)
	case err != nil:
		return fmt.Errorf("redsync unlock %s: %w", l.key, err)
	}
	return nil
}
