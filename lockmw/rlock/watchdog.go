package rlock

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// hold is this process's hold of one key in Redis, held by one local owner at a time. Reentrant leases of
// that owner share it; a release may hand it to the next local waiter (a cohort, see Config.HandOff).
type hold struct {
	key   string
	names names
	// redisOwner is the owner id the lock hash holds in Redis: the owner that took the lock there. Every
	// Redis call of the hold uses it, whichever local owner holds the hold now.
	redisOwner string
	owner      string // the local owner holding it now
	token      int64
	// leases of owner on this key in this process, whose contexts a loss cancels
	leases []*lease
	// since is when the lock was taken in Redis; handOffs counts the local hand-offs since then.
	since    time.Time
	handOffs int

	expiry *time.Timer // fires at the end of the lease as last confirmed: the lease is lost
	valid  time.Time   // the lease is safe until then, by the local clock
	span   trace.Span  // the holder's span at acquisition, for renewal failures and loss
	lost   bool        // ended by the watchdog, not by its release
}

// watchdog keeps every hold of the process alive: one loop renews all of them every lease/3, in one round
// trip per server, and stops when nothing is held. A hold whose renewal finds the lock gone, or that is
// not renewed before its lease runs out, is lost: its context is cancelled with ErrLockLost.
type watchdog struct {
	lease time.Duration
	renew func(ctx context.Context, hs []*hold, lease time.Duration) []error // nil: renewed; ErrNotHeld: gone; else: unknown
	// Optional observers, for logs, spans and metrics.
	onRenewError func(h *hold, err error)
	onLost       func(h *hold, reason error)
	// handOff passes a hold whose last lease ended to the next waiter of its key, if the cohort's bound
	// allows and one waits; it runs under mu.
	handOff func(h *hold) bool

	mu      sync.Mutex
	holds   map[string]*hold // by key: one hold per key and process
	running bool
}

// drift is the clock drift allowed between this process and Redis over one lease, as in Redlock:
// the lease is taken as lost this much before Redis would expire it.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// holder tells who holds key here: the local owner, the owner id in Redis and whether the local owner has
// taken the hold (leases); false when nobody holds it here. A hold handed to a waiter that has not taken
// it yet has no leases.
func (w *watchdog) holder(key string) (owner, redisOwner string, taken, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[key]; h != nil {
		return h.owner, h.redisOwner, len(h.leases) > 0, true
	}
	return "", "", false, false
}

// add starts keeping the hold of lease l (l.h, built by the acquisition). fresh says Redis counts this as
// the owner's first hold. When the owner already holds the key here, a reentry joins that hold instead,
// while a fresh acquisition shows that hold stale (its lock was lost in Redis before the watchdog noticed):
// it is ended as lost.
func (w *watchdog) add(l *lease, fresh bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.holds[l.h.key]
	switch {
	case old != nil && !fresh:
		w.joinLocked(old, l)
		return
	case old != nil:
		cancelAll(w.loseLocked(old))
		go w.reportLost(old, errors.New("the lock was gone when its owner acquired it again"))
	}
	w.startLocked(l.h)
}

// joinLocked makes l one more lease of h, which l's acquisition re-entered.
func (w *watchdog) joinLocked(h *hold, l *lease) {
	valid := l.h.valid
	h.leases = append(h.leases, l)
	l.h = h
	w.extendLocked(h, valid)
}

// startLocked starts renewing h, and the renewal loop if it is not running.
func (w *watchdog) startLocked(h *hold) {
	h.expiry = time.AfterFunc(time.Until(h.valid), func() { w.expire(h) })
	w.holds[h.key] = h
	if !w.running {
		w.running = true
		go w.loop()
	}
}

// released is what a lease's release leaves to do in Redis.
type released int

const (
	releaseInRedis released = iota // run the release script for the hold's Redis owner
	handedOff                      // the hold went to the next waiter here: Redis keeps the lock
	releaseGone                    // the hold was lost and the key is held here again: leave Redis alone
)

// done records the release of lease l. At the hold's last lease the hold goes to the next waiter of the
// key in this process (handOff) or stops being renewed.
func (w *watchdog) done(l *lease) released {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := l.h
	h.leases = slices.DeleteFunc(h.leases, func(x *lease) bool { return x == l })
	switch {
	case h.lost && w.holds[h.key] != nil:
		return releaseGone
	case h.lost || len(h.leases) > 0:
		return releaseInRedis
	case w.handOff(h):
		return handedOff
	}
	w.stopLocked(h)
	return releaseInRedis
}

// take gives hold h, handed to l's owner, to lease l. False when h was lost meanwhile.
func (w *watchdog) take(h *hold, l *lease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds[h.key] != h {
		return false
	}
	h.leases = append(h.leases, l)
	l.h = h
	return true
}

// abandoned takes back hold h from a waiter that gave up before taking it: h goes to the next waiter, or
// stops being renewed and must be released in Redis (true).
func (w *watchdog) abandoned(h *hold) (release bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds[h.key] != h || len(h.leases) > 0 || w.handOff(h) {
		return false
	}
	w.stopLocked(h)
	return true
}

// stopLocked stops renewing h, released.
func (w *watchdog) stopLocked(h *hold) {
	if w.holds[h.key] == h {
		delete(w.holds, h.key)
	}
	h.expiry.Stop()
}

func (w *watchdog) extendLocked(h *hold, valid time.Time) {
	if valid.After(h.valid) {
		h.valid = valid
		h.expiry.Reset(time.Until(valid))
	}
}

// expire runs when h's lease ran out without a renewal.
func (w *watchdog) expire(h *hold) {
	w.mu.Lock()
	expired := w.holds[h.key] == h && !time.Now().Before(h.valid) // not released, nor renewed as the timer fired
	w.mu.Unlock()
	if expired {
		w.lose(h, errors.New("lease expired before it could be renewed"))
	}
}

func (w *watchdog) lose(h *hold, reason error) {
	w.mu.Lock()
	if w.holds[h.key] != h {
		w.mu.Unlock()
		return
	}
	leases := w.loseLocked(h)
	w.mu.Unlock()
	// Reported before the leases end: a holder that sees its lease's context end finds the loss already
	// on its span, in the log and in the counter.
	w.reportLost(h, reason)
	cancelAll(leases)
}

// loseLocked forgets the lost hold h and returns its leases, for the caller to cancel. They leave the hold:
// a release meanwhile (done) would otherwise delete from the very slice the caller cancels, outside the
// lock (slices.DeleteFunc clears the elements it drops: a nil lease).
func (w *watchdog) loseLocked(h *hold) []*lease {
	delete(w.holds, h.key)
	h.lost = true
	h.expiry.Stop()
	leases := h.leases
	h.leases = nil
	return leases
}

func cancelAll(leases []*lease) {
	for _, l := range leases {
		l.cancel(ErrLockLost)
	}
}

func (w *watchdog) reportLost(h *hold, reason error) {
	if w.onLost != nil {
		w.onLost(h, reason)
	}
}

// loop renews every hold each lease/3 until nothing is held.
func (w *watchdog) loop() {
	period := w.lease / 3
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		hs := w.heldOrStop()
		if len(hs) == 0 {
			return
		}
		w.renewRound(hs, period)
	}
}

// heldOrStop returns the holds to renew. With none it marks the loop stopped, under the same lock as add
// checks it: a hold added later starts a new loop.
func (w *watchdog) heldOrStop() []*hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.holds) == 0 {
		w.running = false
		return nil
	}
	return slices.Collect(maps.Values(w.holds))
}

// renewRound renews hs, bounded by one period, and applies each outcome.
func (w *watchdog) renewRound(hs []*hold, period time.Duration) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), period)
	errs := w.renew(ctx, hs, w.lease)
	cancel()
	valid := sent.Add(w.lease - drift(w.lease))
	for i, err := range errs {
		w.renewed(hs[i], valid, err)
	}
}

// renewed applies the outcome of one renewal.
func (w *watchdog) renewed(h *hold, valid time.Time, err error) {
	switch {
	case err == nil:
		w.extend(h, valid)
	case errors.Is(err, ErrNotHeld):
		w.lose(h, err)
	case w.onRenewError != nil:
		// Unknown outcome (timeout, connection): try again next period; the expiry timer declares the
		// lease lost if no renewal lands in time.
		w.onRenewError(h, err)
	}
}

// kept reports whether h is still kept: neither released nor lost.
func (w *watchdog) kept(h *hold) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holds[h.key] == h
}

// extend moves h's expiry to valid, unless h ended meanwhile.
func (w *watchdog) extend(h *hold, valid time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds[h.key] == h {
		w.extendLocked(h, valid)
	}
}
