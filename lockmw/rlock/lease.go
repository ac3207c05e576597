package rlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// errReleased is the cancel cause of a lease's context after its release.
var errReleased = errors.New("rlock: lock released")

// releaseTries is how often a release is sent before its outcome counts as unknown.
const releaseTries = 3

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

// Release ends the lease here, then in Redis.
func (l *lease) Release(ctx context.Context) error {
	step, err := l.end(ctx)
	l.cancel(errReleased)
	if step != releaseInRedis {
		return err
	}
	return l.e.releaseHold(ctx, l.h, l.e.newUnlock(l.h))
}

// end ends the lease in this process and tells what is left to do in Redis. Whatever Redis will answer,
// this process stops renewing first: a release that cannot be confirmed must let the lock expire rather
// than keep it alive forever, and a renewal racing the release must not report the lock lost.
func (l *lease) end(ctx context.Context) (released, error) {
	if !l.released.CompareAndSwap(false, true) {
		return releaseGone, fmt.Errorf("%w: lease of %s already released", ErrNotHeld, l.key)
	}
	l.e.tel.hold.Record(ctx, time.Since(l.acquired).Seconds(), l.e.tel.attrs.hold...)
	step := l.e.dog.done(l)
	if step == releaseGone {
		// The hold was lost and the key is held here again: the lock in Redis is the new hold's, which a
		// release by owner id could take away.
		return step, fmt.Errorf("%w: lease of %s was lost", ErrNotHeld, l.key)
	}
	return step, nil
}

// ReleaseIn ends lease as Release does, but queues the Redis call the release needs on pipe instead of
// sending it, so that it goes out with the caller's other commands in one round trip (a handler's outcome
// events and acks, say). The caller sends pipe, then calls finish with Exec's error: finish completes the
// release, sending it again the usual way if the pipeline did not deliver it, and returns Release's error.
// The lease's context ends at finish. pipe must be a pipeline of the Redis the lock lives on, so ReleaseIn
// queues only for a Reentrant lease; any other lease is released by finish.
func ReleaseIn(ctx context.Context, pipe redis.Pipeliner, held Lease) (finish func(error) error) {
	l, ok := held.(*lease)
	var single singleNode
	if ok {
		single, ok = l.e.be.(singleNode)
	}
	if !ok {
		return func(error) error { return held.Release(ctx) }
	}
	step, err := l.end(ctx)
	if step != releaseInRedis {
		return func(error) error { l.cancel(errReleased); return err }
	}
	req := l.e.newUnlock(l.h)
	cmd := single.queueRelease(ctx, pipe, req)
	return func(error) error {
		l.cancel(errReleased)
		rep, err := parseRelease(cmd)
		if err == nil {
			return l.e.afterRelease(l.h, rep)
		}
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			req.sent[0].rewind(0) // it did not run
		}
		// Not sent, not loaded (NOSCRIPT) or no reply: the same request again, which its latch and sends
		// make safe.
		return l.e.releaseHold(ctx, l.h, req)
	}
}

// Extend makes the lock last at least d from now (see Lease.Extend).
func (l *lease) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("rlock: extend %s by %v: want a positive duration", l.key, d)
	}
	if err := l.held(); err != nil {
		return err
	}
	sent := time.Now()
	err := l.e.be.renew(ctx, []*hold{l.h}, d)[0]
	if err == nil {
		l.e.dog.extend(l.h, sent.Add(d-drift(d)))
		return nil
	}
	return l.failed("extend", err)
}

// TTL returns the lock's remaining lease in Redis (see Lease.TTL).
func (l *lease) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.held(); err != nil {
		return 0, err
	}
	ttl, err := l.e.be.ttl(ctx, l.h.names, l.h.redisOwner)
	if err != nil {
		return 0, l.failed("ttl", err)
	}
	return ttl, nil
}

// held returns ErrNotHeld once the lease was released or its hold lost, without asking Redis: the owner
// may hold the key again through a newer hold, which is not this lease's.
func (l *lease) held() error {
	switch {
	case l.released.Load():
		return fmt.Errorf("%w: lease of %s already released", ErrNotHeld, l.key)
	case !l.e.dog.kept(l.h):
		return fmt.Errorf("%w: lease of %s was lost", ErrNotHeld, l.key)
	}
	return nil
}

// failed wraps the error of op; ErrNotHeld says the lock is gone, so the hold is lost at once, as the
// watchdog would find at its next renewal.
func (l *lease) failed(op string, err error) error {
	if errors.Is(err, ErrNotHeld) {
		l.e.dog.lose(l.h, err)
	}
	return join(fmt.Errorf("rlock: %s %s", op, l.key), err)
}

// releaseHold runs the release script for one hold of h, retrying a failed round trip with the same request
// req: its latch and sends make a retry whose first try did land return that result instead of taking a
// second reentrant hold, or reading the lock it freed as not held.
func (e *engine) releaseHold(ctx context.Context, h *hold, req *unlock) error {
	var err error
	for try := range releaseTries {
		var rep releaseReply
		if rep, err = e.be.release(ctx, req); err == nil {
			return e.afterRelease(h, rep)
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(try+1) * 10 * time.Millisecond)
	}
	return join(fmt.Errorf("rlock: release %s", h.key), err)
}

// afterRelease reads the outcome of a release: -1 holds left says the owner did not hold the lock; 0 that
// the lock is free, so this process's next waiter may try.
func (e *engine) afterRelease(h *hold, rep releaseReply) error {
	if rep.left == 0 {
		e.freed(h, rep.receivers)
	}
	if rep.left < 0 {
		return fmt.Errorf("%w: %s by %s (expired or taken away)", ErrNotHeld, h.names.lock, h.redisOwner)
	}
	return nil
}
