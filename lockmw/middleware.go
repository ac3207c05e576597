package lockmw

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Middleware takes a lock around a Watermill handler: it acquires the lock of the message's key, runs the
// handler under the lease's context (cancelled with rlock.ErrLockLost if the lock is lost) and releases the
// lock afterwards, also when the handler fails or panics.
type Middleware struct {
	// Locker takes the locks. Required.
	Locker rlock.Locker
	// Key returns the lock key of a message. Required. An error is returned by the handler as is.
	Key func(msg *message.Message) (string, error)
	// Instance names this process in lock owners: a handler run owns its lock as
	// "<Instance>:<random>:<message UUID>:<run>", so a nested acquisition of the same key in the run
	// re-enters it, while a second delivery of the same message (a claim while the first still runs)
	// waits its turn. Optional.
	Instance string

	runs atomic.Uint64
}

type leaseKey struct{}

// LeaseFrom returns the lease the middleware holds for the message whose context is ctx.
func LeaseFrom(ctx context.Context) (rlock.Lease, bool) {
	lease, ok := ctx.Value(leaseKey{}).(rlock.Lease)
	return lease, ok
}

// Middleware wraps h.
func (m *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	if m.Locker == nil || m.Key == nil {
		panic("lockmw: Middleware needs a Locker and a Key function")
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

// handle runs h on msg under the lock of the message's key.
func (m *Middleware) handle(h message.HandlerFunc, msg *message.Message, prefix string) (_ []*message.Message, err error) {
	key, err := m.Key(msg)
	if err != nil {
		return nil, err
	}
	orig := msg.Context()
	owner := prefix + ":" + msg.UUID + ":" + strconv.FormatUint(m.runs.Add(1), 10)
	lease, err := m.Locker.Acquire(rlock.WithOwner(orig, owner), key)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", key, err)
	}
	defer func() {
		if rerr := releaseRun(msg, orig, lease); rerr != nil {
			err = withUnlockError(err, key, rerr)
		}
	}()
	msg.SetContext(context.WithValue(lease.Context(), leaseKey{}, lease))
	return h(msg)
}

// releaseRun gives the message its context back and releases the lease; a lease that was lost or expired
// is no error here.
func releaseRun(msg *message.Message, orig context.Context, lease rlock.Lease) error {
	msg.SetContext(orig) // a retry must not start from a released lease's context
	// The release must not inherit a cancelled message context: it frees the key for others.
	if err := lease.Release(context.WithoutCancel(orig)); !errors.Is(err, rlock.ErrNotHeld) {
		return err
	}
	return nil
}

// withUnlockError adds a failed release to the handler's outcome, on one line.
func withUnlockError(err error, key string, rerr error) error {
	if err == nil {
		return fmt.Errorf("unlock %s: %w", key, rerr)
	}
	return fmt.Errorf("%w; unlock %s: %w", err, key, rerr)
}
