package lockmw

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Middleware runs a Watermill handler inside the exclusive section of the message's key(s), obtained one of
// three ways (Section.Path): acquired in Redis (or re-entered), handed off by the previous holder in this
// process (rlock's cohorts), or elided into the handler's own write (WithKeys). An acquired lock is held
// under the lease's context (cancelled with rlock.ErrLockLost if the lock is lost) and released afterwards,
// also when the handler fails or panics: the middleware is the one place that takes and releases it. Every
// message whose handler succeeds records its wait for the section (Section.RecordWait), and tells Waits.
type Middleware struct {
	// Locker takes the locks. Required.
	Locker rlock.Locker
	// Key returns the lock key of a message. An error is returned by the handler as is. A message whose
	// context carries its keys (WithKeys) is not asked. Optional: without Key and Keys, every message's
	// context must carry them.
	Key func(msg *message.Message) (string, error)
	// Keys returns the lock keys of a message, used instead of Key when set: one key is taken as Key's;
	// several are taken all or none with rlock.AcquireAll (in sorted order, so handlers whose key sets
	// overlap cannot deadlock), under one wait of at most Wait for the set, and the handler runs under the
	// MultiLease (MultiLeaseFrom), which ends when any of the leases ends.
	Keys func(msg *message.Message) ([]string, error)
	// Wait bounds how long a message waits for all its Keys together: one wait covers the whole set, each
	// key getting what is left of it (rlock.WithWaitDeadline), and each at most the locker's MaxWait. It does
	// not bound the handler. Default 0: only the locker's own wait, per key. A single key waits as with Key.
	Wait time.Duration
	// Instance names this process in lock owners: a handler run owns its lock as
	// "<Instance>:<random>:<message UUID>:<run>", so a nested acquisition of the same key in the run
	// re-enters it, while a second delivery of the same message (a claim while the first still runs)
	// waits its turn. Optional.
	Instance string
	// Fencer, when set, is given each acquired lease's key and fencing token before the handler runs, to
	// store the token where the handler's writes are checked: for a lock whose fencing counters live away
	// from the data (Redlock's masters). An error fails the message, the lock released. Optional.
	Fencer Fencer
	// Waits, when set, is told each wait the middleware records, and each that a handler records in its
	// section (Section.RecordWait): a view of the waits by key, such as the hot SKUs of internal/hot.
	// Default nil: the histogram and the spans only.
	Waits WaitRecorder

	runs atomic.Uint64
}

// Fencer stores a lock's fencing token where the writes under it are checked (inventory.Store.RaiseFence).
type Fencer interface {
	RaiseFence(ctx context.Context, key string, token int64) error
}

// ErrLocked is what a handler running in an elided section (Section.Elided) returns, wrapped, when its
// write found the lock held by somebody else and wrote nothing: the middleware then takes the lock.
var ErrLocked = errors.New("lockmw: the lock is held")

// LeaseFrom returns the lease the middleware holds for the message whose context is ctx, when it took one
// key's lock (its Section's).
func LeaseFrom(ctx context.Context) (rlock.Lease, bool) {
	sec, ok := SectionFrom(ctx)
	if !ok {
		return nil, false
	}
	lease, ok := sec.lease.(rlock.Lease)
	return lease, ok
}

// MultiLeaseFrom returns the leases the middleware holds for the message whose context is ctx, when it took
// several keys' locks.
func MultiLeaseFrom(ctx context.Context) (*rlock.MultiLease, bool) {
	sec, ok := SectionFrom(ctx)
	if !ok {
		return nil, false
	}
	m, ok := sec.lease.(*rlock.MultiLease)
	return m, ok
}

// LeasesFrom returns every lease the middleware holds for the message whose context is ctx, sorted by key:
// one, several, or none (Section.Leases).
func LeasesFrom(ctx context.Context) []rlock.Lease {
	if sec, ok := SectionFrom(ctx); ok {
		return sec.Leases()
	}
	return nil
}

// held is what a handler run holds: a lease, or a MultiLease.
type held interface {
	Context() context.Context
	Release(ctx context.Context) error
}

// Middleware wraps h.
func (m *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	if m.Locker == nil {
		panic("lockmw: Middleware needs a Locker")
	}
	prefix := m.ownerPrefix()
	return func(msg *message.Message) ([]*message.Message, error) {
		return m.handle(h, msg, prefix)
	}
}

// ownerPrefix names this process in the owners of its handler runs. A random part per process: a restarted
// worker with the same name must not produce the owner of its previous incarnation, whose lock may still
// be held.
func (m *Middleware) ownerPrefix() string {
	prefix := uuid.NewString()
	if m.Instance != "" {
		prefix = m.Instance + ":" + prefix[:8]
	}
	return prefix
}

// keys returns the lock keys of msg, and whether its handler may run elided (WithKeys).
func (m *Middleware) keys(msg *message.Message) (keys []string, elide bool, err error) {
	if r, ok := msg.Context().Value(keysKey{}).(request); ok {
		return r.keys, r.ways&MayElide != 0, nil
	}
	switch {
	case m.Keys != nil:
		keys, err = m.Keys(msg)
	case m.Key != nil:
		var key string
		key, err = m.Key(msg)
		keys = []string{key}
	default:
		err = fmt.Errorf("lockmw: message %s carries no lock keys (WithKeys), and the middleware has no Key or Keys", msg.UUID)
	}
	return keys, false, err
}

// handle runs h on msg in the exclusive section of the message's keys.
func (m *Middleware) handle(h message.HandlerFunc, msg *message.Message, prefix string) ([]*message.Message, error) {
	keys, elide, err := m.keys(msg)
	if err != nil {
		return nil, err
	}
	since := waitingSince(msg.Context())
	if elide {
		msgs, err := m.runElided(h, msg, keys, since)
		if !errors.Is(err, ErrLocked) {
			return msgs, err
		}
	}
	return m.runLocked(h, msg, keys, prefix, since)
}

// runElided runs h in a section whose lock its own write takes.
func (m *Middleware) runElided(h message.HandlerFunc, msg *message.Message, keys []string, since time.Time) ([]*message.Message, error) {
	orig := msg.Context()
	sec := &Section{Keys: keys, Path: PathElided, Since: since, Start: time.Now(), waits: m.Waits}
	msg.SetContext(WithSection(orig, sec))
	defer msg.SetContext(orig)
	msgs, err := h(msg)
	if err == nil {
		sec.RecordWait(orig, sec.wait())
	}
	return msgs, err
}

// runLocked takes the locks of keys, runs h under them and releases them.
func (m *Middleware) runLocked(h message.HandlerFunc, msg *message.Message, keys []string, prefix string, since time.Time) (_ []*message.Message, err error) {
	orig := msg.Context()
	owner := prefix + ":" + msg.UUID + ":" + strconv.FormatUint(m.runs.Add(1), 10)
	lease, err := m.acquire(rlock.WithOwner(orig, owner), keys)
	name := strings.Join(keys, ",")
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	defer func() {
		if rerr := releaseRun(msg, orig, lease); rerr != nil {
			err = withUnlockError(err, name, rerr)
		}
	}()
	sec := newSection(keys, lease, since)
	sec.waits = m.Waits
	if err := m.fence(orig, sec); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	msg.SetContext(WithSection(lease.Context(), sec))
	msgs, err := h(msg)
	if err == nil {
		sec.RecordWait(orig, sec.wait())
	}
	return msgs, err
}

// fence stores the tokens of sec's leases with Fencer, when set.
func (m *Middleware) fence(ctx context.Context, sec *Section) error {
	if m.Fencer == nil {
		return nil
	}
	for _, lease := range sec.Leases() {
		if lease.Token() == 0 { // a lock without tokens (an embedder's): nothing to fence with
			continue
		}
		if err := m.Fencer.RaiseFence(ctx, lease.Key(), lease.Token()); err != nil {
			return err
		}
	}
	return nil
}

// acquire takes the lock of one key, or of several with AcquireAll within Wait.
func (m *Middleware) acquire(ctx context.Context, keys []string) (held, error) {
	if len(keys) == 1 {
		return m.Locker.Acquire(ctx, keys[0])
	}
	if m.Wait > 0 {
		ctx = rlock.WithWaitDeadline(ctx, time.Now().Add(m.Wait))
	}
	return rlock.AcquireAll(ctx, m.Locker, keys)
}

// releaseRun gives the message its context back and releases the lease; a lease that was lost or expired
// is no error here, also when it is one of several: the others' errors still are.
func releaseRun(msg *message.Message, orig context.Context, lease held) error {
	msg.SetContext(orig) // a retry must not start from a released lease's context
	// The release must not inherit a cancelled message context: it frees the key for others.
	err := lease.Release(context.WithoutCancel(orig))
	if _, several := lease.(*rlock.MultiLease); several {
		err = withoutNotHeld(err)
	}
	if errors.Is(err, rlock.ErrNotHeld) {
		return nil
	}
	return err
}

// withoutNotHeld drops the ErrNotHeld of the leases of a MultiLease's joined release error.
func withoutNotHeld(err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	return errors.Join(slices.DeleteFunc(slices.Clone(joined.Unwrap()), func(e error) bool {
		return errors.Is(e, rlock.ErrNotHeld)
	})...)
}

// withUnlockError adds a failed release to the handler's outcome, on one line.
func withUnlockError(err error, key string, rerr error) error {
	if err == nil {
		return fmt.Errorf("unlock %s: %w", key, rerr)
	}
	return fmt.Errorf("%w; unlock %s: %w", err, key, rerr)
}
