package rlock

import (
	"context"
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
// with l.Acquire under ctx, one after the other.
//
// One wait covers the whole set: bound it with WithWaitDeadline, and each Acquire waits for what is left of
// it (and at most the locker's Config.MaxWait, as always). Without it the set may wait MaxWait per key. A
// deadline of ctx bounds the wait too, but also ends the leases, whose contexts derive from ctx.
//
// When a key cannot be taken, the locks taken before it are released (in reverse order) and the error
// names the key and wraps its Acquire's error: ErrNotObtained when the wait ended. Retry later, after a
// random pause, rather than at once.
//
// Every key is taken by one owner, OwnerFrom(ctx) or a new one: an Acquire of one of the keys under the
// MultiLease's Context re-enters.
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
	m.stats = sumStats(m.leases, time.Since(start))
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

// sumStats are the stats of a set of leases taken in waited: their attempts summed; a reentry or a hand-off
// when every lease was one.
func sumStats(leases []Lease, waited time.Duration) AcquireStats {
	stats := make([]AcquireStats, len(leases))
	sum := AcquireStats{Waited: waited}
	for i, lease := range leases {
		stats[i] = StatsOf(lease)
		sum.Attempts += stats[i].Attempts
	}
	sum.Reentry = !slices.ContainsFunc(stats, func(s AcquireStats) bool { return !s.Reentry })
	sum.HandOff = !slices.ContainsFunc(stats, func(s AcquireStats) bool { return !s.HandOff })
	return sum
}

// watch makes the MultiLease's context, which carries ctx's values (the owner) and ends with the first
// lease's context that ends, with its cause.
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
		cancel(errReleased)
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

// Lease returns the lease of key, nil when key is not in the set.
func (m *MultiLease) Lease(key string) Lease {
	i := slices.IndexFunc(m.leases, func(l Lease) bool { return l.Key() == key })
	if i < 0 {
		return nil
	}
	return m.leases[i]
}

// Token is the fencing token of key's lease (Lease.Token), 0 when key is not in the set.
func (m *MultiLease) Token(key string) int64 {
	if lease := m.Lease(key); lease != nil {
		return lease.Token()
	}
	return 0
}

// Context is done when the leases are released or one of them is lost (context.Cause then is that lease's
// cause: ErrLockLost). Do the guarded work under it: it carries the owner, so an Acquire of one of the
// keys under it re-enters.
func (m *MultiLease) Context() context.Context { return m.ctx }

// Stats says how the set was obtained: Waited is the time AcquireAll took, Attempts the sum of the keys'
// attempts, Reentry and HandOff true when every key's lease was one (each lease's own are StatsOf it).
func (m *MultiLease) Stats() AcquireStats { return m.stats }

// Release gives up every hold of the set, in reverse order, and returns their errors joined on one line
// (ErrNotHeld for a lock that expired or was taken away meanwhile, or for a second Release).
func (m *MultiLease) Release(ctx context.Context) error {
	m.stop()
	var errs []error
	for i := len(m.leases) - 1; i >= 0; i-- {
		if err := m.leases[i].Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return joinNodes(errs)
}
