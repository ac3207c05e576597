package rlock

import (
	"context"
	"math/rand/v2"
	"time"
)

// waitInQueue queues behind this process's earlier waiters for the key; at the head it attempts whenever an
// unlock message arrives, and otherwise when the holder's lease would run out.
func (a *acquisition) waitInQueue() (l *lease, err error) {
	w, first := a.e.queue.join(a.names.channel, a.owner)
	var readies []<-chan struct{}
	if first { // the key's first waiter subscribes to its unlock channel for the whole queue
		readies = a.e.subscribe(a.names.channel)
	}
	defer func() { a.e.leaveQueue(a.names.channel, w, l != nil) }()
	// Attempt only once an unlock message could reach us; else a release between the attempt and the
	// subscription would leave us waiting for the whole lease.
	if err = anyReady(a.waitCtx, readies); err != nil {
		return nil, err
	}
	q := &queued{acquisition: a, w: w, retryIn: a.e.cfg.Lease}
	return q.run()
}

// subscribe holds the unlock channel on every notifier. It returns, per notifier, a channel closed once
// that subscription is confirmed.
func (e *engine) subscribe(channel string) []<-chan struct{} {
	readies := make([]<-chan struct{}, 0, len(e.notifiers))
	for _, nt := range e.notifiers {
		readies = append(readies, nt.hold(channel))
	}
	return readies
}

// leaveQueue takes w out of its queue; the last waiter to leave drops the queue's subscription. A hold
// handed to w that w did not take goes on to the next waiter, or is released in Redis.
func (e *engine) leaveQueue(channel string, w *waiter, acquired bool) {
	last, abandoned := e.queue.leave(channel, w, acquired)
	if abandoned != nil && e.dog.abandoned(abandoned) {
		e.releaseHold(context.Background(), abandoned, e.newUnlock(abandoned))
	}
	if !last {
		return
	}
	for _, nt := range e.notifiers {
		nt.drop(channel)
	}
}

// anyReady waits until one of the notifier subscriptions is confirmed, or one second: past that the
// waiter relies on its fallback timer (a notifier whose Redis is down never confirms).
func anyReady(ctx context.Context, readies []<-chan struct{}) error {
	if len(readies) == 0 {
		return nil
	}
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	ready, stop := firstOf(readies)
	defer stop()
	select {
	case <-ready:
	case <-timeout.C:
	case <-ctx.Done():
		return notObtained(ctx)
	}
	return nil
}

// firstOf returns a channel that receives once one of chans is closed; stop ends the watch.
func firstOf(chans []<-chan struct{}) (first <-chan struct{}, stop func()) {
	merged := make(chan struct{}, len(chans))
	done := make(chan struct{})
	for _, c := range chans {
		go func() {
			select {
			case <-c:
				merged <- struct{}{}
			case <-done:
			}
		}()
	}
	return merged, func() { close(done) }
}

// queued is an acquisition waiting in this process's queue for its key.
type queued struct {
	*acquisition
	w        *waiter
	fallback *time.Timer   // the head's retry for when no unlock message comes
	retryIn  time.Duration // when the fallback fires: the holder's remaining lease
	lastErr  error         // why the last attempt failed, when not just another holder
	// After an attempt that gave back part of the lock (Redlock), its own unlock messages arrive at once:
	// an attempt asked for before quietUntil waits until then, a random delay that lets colliding
	// processes fall out of step.
	quietUntil time.Time
}

// run waits for turns until the lock is held or the wait ends.
func (q *queued) run() (*lease, error) {
	defer q.stopFallback()
	for {
		t := q.turn()
		if t.granted != nil {
			if l := q.takeHandOff(t.granted); l != nil {
				return l, nil
			}
		} else if !t.try {
			if err := q.sleep(t.head); err != nil {
				return nil, err
			}
			continue
		}
		res, err := q.try()
		switch {
		case err != nil:
			return nil, join(err, q.lastErr)
		case res.ok:
			return q.newLease(res), nil
		}
		q.failed(res) // and look again: a message may have arrived during the attempt
	}
}

// turn tells what the waiter should do now. An attempt is put off while another owner holds the key in
// this process (its release hands the lock on or announces it), and while quiet or yielding.
func (q *queued) turn() turn {
	t := q.e.queue.turn(q.names.channel, q.w)
	if !t.try || t.granted != nil {
		return t
	}
	if owner, _, _, held := q.e.dog.holder(q.key); held && owner != q.owner {
		t.try = false
		return t
	}
	if notBefore := later(q.quietUntil, t.notBefore); time.Now().Before(notBefore) {
		q.retryAfter(time.Until(notBefore))
		t.try = false
	}
	return t
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// failed takes in an attempt that found the lock held: why, when to retry at the latest, whether to keep
// quiet.
func (q *queued) failed(res attempt) {
	q.lastErr = res.err
	q.retryIn = q.e.cfg.Lease
	if res.pttl >= 0 {
		q.retryIn = res.pttl
	}
	if res.quiet {
		q.quietUntil = time.Now().Add(retryAfterFailure())
	}
	q.stopFallback()
}

// sleep waits for a wake-up (an unlock message, or the waiter became head), the head's fallback timer, or
// the end of the wait.
func (q *queued) sleep(head bool) error {
	select {
	case <-q.w.wake:
	case <-q.fallbackTimer(head):
		q.fallback = nil
		q.e.queue.retryLater(q.w)
	case <-q.waitCtx.Done():
		return join(notObtained(q.waitCtx), q.lastErr)
	}
	return nil
}

// fallbackTimer returns the head's fallback timer, started at the holder's remaining lease if it is not
// running; nil (never fires) for a waiter behind the head.
func (q *queued) fallbackTimer(head bool) <-chan time.Time {
	if !head {
		return nil
	}
	if q.fallback == nil {
		q.fallback = time.NewTimer(jitter(q.retryIn))
	}
	return q.fallback.C
}

func (q *queued) retryAfter(d time.Duration) {
	q.stopFallback()
	q.fallback = time.NewTimer(d)
}

func (q *queued) stopFallback() {
	if q.fallback != nil {
		q.fallback.Stop()
		q.fallback = nil
	}
}

// jitter spreads fallback retries of waiters in different processes; +0-10 %, at least 1 ms.
func jitter(d time.Duration) time.Duration {
	d += time.Millisecond
	return d + rand.N(d/10+1)
}
