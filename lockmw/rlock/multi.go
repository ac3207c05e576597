package rlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// MultiLease is a hold of the locks of several keys, taken together by AcquireAll (Redisson's MultiLock).
type MultiLease struct {
	leases []Lease // sorted by key
	ctx    context.Context
	stop   func() // ends ctx
	stats  AcquireStats
}

// AcquireAll takes the locks of keys (duplicates count once), all or none, in one global order: sorted by
// key, so that two callers whose key sets overlap never wait for each other in a cycle. Each key is taken
// with l.Acquire under ctx: bound the wait for the whole set with WithWaitDeadline (each Acquire also
// stops at the locker's own maximum wait; a deadline of ctx itself would end the leases too). When a key cannot be taken, the locks taken before it are released
// and the error wraps ErrNotObtained and names the key; retry later, after a random pause, rather than at
// once. Every key is taken by one owner, OwnerFrom(ctx) or a new one: an Acquire of one of the keys under
// the MultiLease's Context re-enters.
func AcquireAll(ctx context.Context, l Locker, keys []string) (*MultiLease, error) {
	keys, err := sortedKeys(keys)
	if err != nil {
		return nil, err
	}
	if OwnerFrom(ctx) == "" {
		ctx = WithOwner(ctx, uuid.NewString())
	}
	start := time.Now()
	m := &MultiLease{stop: func() {}}
	for _, key := range keys {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			_ = m.Release(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("lock %s of %d keys: %w", key, len(keys), err)
		}
		m.leases = append(m.leases, lease)
	}
	m.stats.Waited = time.Since(start)
	for _, lease := range m.leases {
		m.stats.Attempts += StatsOf(lease).Attempts
	}
	m.watch(ctx)
	return m, nil
}

// sortedKeys are keys sorted, each once, checked.
func sortedKeys(keys []string) ([]string, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidKey)
	}
	for _, key := range keys {
		if err := validateKey(key); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// watch makes the lease's context, which carries ctx's values (the owner) and ends with the first lease's
// context that ends, with its cause.
func (m *MultiLease) watch(ctx context.Context) {
	// Not bounded by the set's wait any more: a nested Acquire under it waits as any other.
	c, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), waitDeadlineKey{}, nil))
	var stops []func() bool
	for _, lease := range m.leases {
		lc := lease.Context()
		stops = append(stops, context.AfterFunc(lc, func() { cancel(context.Cause(lc)) }))
	}
	m.ctx = c
	m.stop = func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// Keys are the keys held, sorted.
func (m *MultiLease) Keys() []string {
	keys := make([]string, len(m.leases))
	for i, lease := range m.leases {
		keys[i] = lease.Key()
	}
	return keys
}

// Leases are the leases of the keys, sorted by key.
func (m *MultiLease) Leases() []Lease { return slices.Clone(m.leases) }

// Context is done when the leases are released or one of them is lost (context.Cause then is that lease's
// cause: ErrLockLost). Do the guarded work under it: it carries the owner.
func (m *MultiLease) Context() context.Context { return m.ctx }

// Stats says how the set was obtained: Waited is the time AcquireAll took, Attempts the sum of the keys'
// attempts (each lease's own are StatsOf it).
func (m *MultiLease) Stats() AcquireStats { return m.stats }

// Release gives up every hold of the set, in reverse order, and returns their errors joined (ErrNotHeld
// for a lock that expired or was taken away meanwhile).
func (m *MultiLease) Release(ctx context.Context) error {
	m.stop()
	var errs []error
	for i := len(m.leases) - 1; i >= 0; i-- {
		errs = append(errs, m.leases[i].Release(ctx))
	}
	return errors.Join(errs...)
}
