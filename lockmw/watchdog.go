package lockmw

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// errReleased is the cancel cause of a lease's context after its release.
var errReleased = errors.New("lockmw: lock released")

// hold is one owner's hold of one key in this process. Reentrant leases of the same owner share it.
type hold struct {
	names names
	owner string
	token int64
	// leases of this owner on this key in this process, whose contexts a loss cancels
	leases []*lease

	expiry *time.Timer // fires at the end of the lease as last confirmed: the lease is lost
	valid  time.Time   // the lease is safe until then, by the local clock
	span   trace.Span  // the holder's span at acquisition, for renewal failures and loss
	lost   bool        // ended by the watchdog, not by its release
}

type holdKey struct{ key, owner string }

// watchdog keeps every hold of the process alive: one loop renews all of them every lease/3, in one round
// trip per server, and stops when nothing is held. A hold whose renewal finds the lock gone, or that is
// not renewed before its lease runs out, is lost: its context is cancelled with ErrLockLost.
type watchdog struct {
	lease time.Duration
	renew func(ctx context.Context, hs []*hold) []error // nil: renewed; ErrNotHeld: gone; else: unknown
	// Optional observers, for logs, spans and metrics.
	onRenewError func(h *hold, err error)
	onLost       func(h *hold, reason error)

	mu      sync.Mutex
	holds   map[holdKey]*hold
	running bool
}

// drift is the clock drift allowed between this process and Redis over one lease, as in Redlock:
// the lease is taken as lost this much before Redis would expire it.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// get returns the hold of owner on key, or nil.
func (w *watchdog) get(key, owner string) *hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holds[holdKey{key, owner}]
}

// add records lease l of owner on key, valid until valid, and sets l.h. A new hold starts being renewed.
// fresh says Redis counts this as the owner's first hold: an older local hold of the same owner is then
// stale (its lock was lost in Redis before the watchdog noticed) and is ended as lost.
func (w *watchdog) add(key string, n names, owner string, l *lease, token int64, fresh bool, valid time.Time, span trace.Span) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := holdKey{key, owner}
	if h := w.holds[k]; h != nil {
		if !fresh {
			h.leases = append(h.leases, l)
			l.h = h
			w.extendLocked(h, valid)
			return
		}
		w.loseLocked(k, h)
		go w.reportLost(h, errors.New("the lock was gone when its owner acquired it again"))
	}
	h := &hold{names: n, owner: owner, token: token, leases: []*lease{l}, valid: valid, span: span}
	l.h = h
	h.expiry = time.AfterFunc(time.Until(valid), func() { w.expire(k, h) })
	w.holds[k] = h
	if !w.running {
		w.running = true
		go w.loop()
	}
}

// done records the release of lease l. At the hold's last lease the hold stops being renewed. It reports
// false when the hold was lost and the owner holds the key again through a newer hold.
func (w *watchdog) done(key string, l *lease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := l.h
	if i := slices.Index(h.leases, l); i >= 0 {
		h.leases = slices.Delete(h.leases, i, i+1)
	}
	k := holdKey{key, h.owner}
	if h.lost {
		return w.holds[k] == nil
	}
	if len(h.leases) > 0 {
		return true
	}
	if w.holds[k] == h {
		delete(w.holds, k)
	}
	h.expiry.Stop()
	return true
}

func (w *watchdog) extendLocked(h *hold, valid time.Time) {
	if valid.After(h.valid) {
		h.valid = valid
		h.expiry.Reset(time.Until(valid))
	}
}

// expire runs when h's lease ran out without a renewal.
func (w *watchdog) expire(k holdKey, h *hold) {
	w.mu.Lock()
	if w.holds[k] != h || time.Now().Before(h.valid) { // released, or renewed as the timer fired
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.lose(k, h, errors.New("lease expired before it could be renewed"))
}

func (w *watchdog) lose(k holdKey, h *hold, reason error) {
	w.mu.Lock()
	if w.holds[k] != h {
		w.mu.Unlock()
		return
	}
	w.loseLocked(k, h)
	w.mu.Unlock()
	w.reportLost(h, reason)
}

func (w *watchdog) loseLocked(k holdKey, h *hold) {
	delete(w.holds, k)
	h.lost = true
	h.expiry.Stop()
	for _, l := range h.leases {
		l.cancel(ErrLockLost)
	}
}

func (w *watchdog) reportLost(h *hold, reason error) {
	if w.onLost != nil {
		w.onLost(h, reason)
	}
}

func (w *watchdog) loop() {
	period := w.lease / 3
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if len(w.holds) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		keys := make([]holdKey, 0, len(w.holds))
		hs := make([]*hold, 0, len(w.holds))
		for k, h := range w.holds {
			keys = append(keys, k)
			hs = append(hs, h)
		}
		w.mu.Unlock()

		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), period)
		errs := w.renew(ctx, hs)
		cancel()
		valid := sent.Add(w.lease - drift(w.lease))
		for i, err := range errs {
			switch {
			case err == nil:
				w.mu.Lock()
				if w.holds[keys[i]] == hs[i] {
					w.extendLocked(hs[i], valid)
				}
				w.mu.Unlock()
			case errors.Is(err, ErrNotHeld):
				w.lose(keys[i], hs[i], err)
			default:
				// Unknown outcome (timeout, connection): try again next period; the expiry timer
				// declares the lease lost if no renewal lands in time.
				if w.onRenewError != nil {
					w.onRenewError(hs[i], err)
				}
			}
		}
	}
}
