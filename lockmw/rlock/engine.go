package rlock

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
	// acquire runs one attempt. On failure it leaves nothing behind: an attempt whose outcome is unknown
	// (cut off, no reply) is undone by its request id, which takes back exactly what the request did,
	// even if it reaches Redis after the undo.
	acquire(ctx context.Context, req request) (attempt, error)
	// release returns the holds left for the owner of req (-1 when it does not hold the lock) and the
	// listeners its unlock message reached. req may be sent again: its latch and sends make that safe.
	release(ctx context.Context, req *unlock) (releaseReply, error)
	// servers is how many Redis servers the lock lives on: one, or the Redlock masters.
	servers() int
	// renew makes each hold last at least lease from now (never shorter), and returns per hold: nil
	// (renewed), ErrNotHeld (gone) or another error (outcome unknown).
	renew(ctx context.Context, hs []*hold, lease time.Duration) []error
	// ttl returns the remaining lease of owner's lock: ErrNotHeld when owner does not hold it.
	ttl(ctx context.Context, n names, owner string) (time.Duration, error)
	// raiseToken raises the fencing counter of n to at least token.
	raiseToken(ctx context.Context, n names, token int64) error
}

// attempt is the outcome of one run of the acquire script (on a quorum, for Redlock).
type attempt struct {
	ok         bool
	redisOwner string // ok: the owner id the lock hash holds
	token      int64
	count      int64         // holds of the owner after the attempt; 1 is a fresh acquisition, more a reentry
	valid      time.Time     // ok: the lease is safe until then (attempt start + lease - drift - elapsed)
	pttl       time.Duration // !ok: when to try again at the latest (the holder's remaining lease); < 0 unknown
	err        error         // !ok: why, when it was not just another holder (Redlock: no quorum)
	// quiet: the attempt took and gave back part of the lock (Redlock minority), publishing unlock messages
	// that would wake the waiters at once; they wait pttl instead, or they would collide again.
	quiet bool
}

// engine is what both lockers share: owners, the local wait queue, unlock notifications and the watchdog.
type engine struct {
	mode      string // reentrant | redlock, for spans and metrics
	tel       telemetry
	cfg       Config
	be        backend
	instance  string
	seq       atomic.Uint64
	queue     *waitQueue
	notifiers []*notifier
	dog       *watchdog
}

// newEngine returns the engine of a locker; cfg has its defaults.
func newEngine(mode string, cfg Config, be backend) (*engine, error) {
	tel, err := newTelemetry(mode, cfg)
	if err != nil {
		return nil, err
	}
	e := &engine{mode: mode, tel: tel, cfg: cfg, be: be, instance: uuid.NewString(), queue: newWaitQueue()}
	e.dog = &watchdog{
		lease:        cfg.Lease,
		renew:        be.renew,
		holds:        make(map[string]*hold),
		onRenewError: e.renewalFailed,
		onLost:       e.lockLost,
		handOff:      e.handOff,
	}
	return e, nil
}

// yieldFor is the head start this process gives the other processes that listen for a lock it freed: its
// own next waiter tries no earlier (see HandOff). Long enough for another process to receive the unlock
// message and run its acquire script, short enough to cost little when that process no longer waits.
const yieldFor = 5 * time.Millisecond

// handOff passes hold h, whose last lease ended, to the key's next waiter here, within the cohort's bound.
// It runs under the watchdog's lock.
func (e *engine) handOff(h *hold) bool {
	if !e.cfg.HandOff.allows(h.handOffs, h.since) {
		return false
	}
	w := e.queue.grant(h.names.channel, h)
	if w == nil {
		return false
	}
	h.owner, h.handOffs = w.owner, h.handOffs+1
	return true
}

// freed wakes this process's next waiter of hold h's lock, which it freed in Redis: at once, or, when the
// hold reached its bound (HandOff) and the unlock message reached listeners beyond this process's own
// subscription, after a head start (yieldFor) that lets another process take its turn. Only at the bound:
// a process stays subscribed a while after its last waiter left, so a listener may not be waiting, and a
// yield to it would leave the lock idle.
func (e *engine) freed(h *hold, receivers int64) {
	if receivers > e.listening(h.names.channel) && !e.cfg.HandOff.allows(h.handOffs, h.since) {
		e.queue.yield(h.names.channel, yieldFor)
		return
	}
	e.queue.notify(h.names.channel)
}

// listening returns how many of the receivers of an unlock message on channel are this process's: one
// when it is subscribed (on each master; the receivers of a release are counted per master).
func (e *engine) listening(channel string) int64 {
	if e.notifiers[0].subscribed(channel) {
		return 1
	}
	return 0
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
func (e *engine) uniqueID() string {
	var buf [64]byte
	return string(strconv.AppendUint(append(append(buf[:0], e.instance...), ':'), e.seq.Add(1), 10))
}

// newUnlock makes a new request to release one hold of h.
func (e *engine) newUnlock(h *hold) *unlock { return newUnlock(h, e.uniqueID(), e.be.servers()) }

// raiseToken raises the fencing counter of key to at least token (never lowers it).
func (e *engine) raiseToken(ctx context.Context, key string, token int64) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := e.be.raiseToken(ctx, e.cfg.names(key), token); err != nil {
		return join(fmt.Errorf("rlock: raise fencing counter of %s", key), err)
	}
	return nil
}
