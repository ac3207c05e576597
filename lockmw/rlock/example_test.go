package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	// Do the guarded work under lease.Context(), which ends if the lock is lost, and hand the fencing token
	// to the store, which refuses tokens older than the newest it has seen.
	fmt.Println("holding", lease.Key(), "with fencing token", lease.Token())
	// Output: holding SKU-1 with fencing token 1
}

func ExampleReentrant_Acquire_nested() {
	ctx := context.Background()
	locker := newReentrant(rlock.Config{})

	outer, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	// The lease's context carries its owner: a nested call under it re-enters at once instead of waiting for
	// itself, and keeps the token.
	inner, err := locker.Acquire(outer.Context(), "SKU-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("re-entered:", rlock.StatsOf(inner).Reentry, "same token:", inner.Token() == outer.Token())
	_ = inner.Release(ctx) // the lock stays held until the outer lease is released too
	_ = outer.Release(ctx)
	// Output: re-entered: true same token: true
}

func ExampleAcquireAll() {
	ctx := context.Background()
	locker := newReentrant(rlock.Config{})

	// An order of several SKUs takes all their locks or none, in sorted order, within one wait for the set.
	wait := rlock.WithWaitDeadline(ctx, time.Now().Add(5*time.Second))
	basket, err := rlock.AcquireAll(wait, locker, []string{"SKU-9", "SKU-2", "SKU-9"})
	if err != nil {
		panic(err) // errors.Is(err, rlock.ErrNotObtained): retry the order later
	}
	defer basket.Release(ctx)
	// Do the guarded work under basket.Context(), which ends if any of the locks is lost.
	for _, key := range basket.Keys() {
		fmt.Println("holding", key, "with fencing token", basket.Token(key))
	}
	// Output:
	// holding SKU-2 with fencing token 1
	// holding SKU-9 with fencing token 1
}

func ExampleReentrant_TryAcquire() {
	ctx := context.Background()
	locker := newReentrant(rlock.Config{})

	holder, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "SKU-1") // another owner: no owner in ctx
	fmt.Println(err)
	_ = holder.Release(ctx)

	lease, err := locker.TryAcquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println("then token", lease.Token())
	// Output:
	// rlock: lock not obtained
	// then token 2
}

func ExampleConfig_maxWait() {
	ctx := context.Background()
	locker := newReentrant(rlock.Config{MaxWait: 50 * time.Millisecond})

	holder, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	defer holder.Release(ctx)
	_, err = locker.Acquire(ctx, "SKU-1")
	fmt.Println(err)
	fmt.Println(errors.Is(err, rlock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// rlock: lock not obtained: waited the maximum of 50ms: context deadline exceeded
	// true true
}

func ExampleLease_Extend() {
	ctx := context.Background()
	locker := newReentrant(rlock.Config{Lease: 10 * time.Second})

	lease, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	// The watchdog keeps the lock at 10 s from its last renewal. Before a step that may stall this process
	// for longer, make the lock outlive such a stall.
	if err := lease.Extend(ctx, time.Minute); err != nil {
		panic(err)
	}
	ttl, err := lease.TTL(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("held for about a minute more:", ttl > 59*time.Second && ttl <= time.Minute)
	// Output: held for about a minute more: true
}

func ExampleNewRedlock() {
	ctx := context.Background()
	var clients []redis.UniversalClient
	for _, addr := range redisAddrs(3) { // three independent masters, no replication between them
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := rlock.NewRedlock(clients, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "SKU-1")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	ttl, err := lease.TTL(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("held by a majority of", len(clients), "masters, token", lease.Token(), "lease ≤ 30s:",
		ttl <= rlock.DefaultLease)
	// Output: held by a majority of 3 masters, token 1 lease ≤ 30s: true
}

// The examples run against redis-servers of their own; in your code, the addresses are where your Redis runs
// (such as "localhost:6379").
var (
	servers redistest.Examples
	closers []func() error // of newReentrant
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range closers {
		_ = c()
	}
	servers.Stop()
	os.Exit(code)
}

// redisAddr is the address of an empty redis-server.
func redisAddr() string { return servers.Addrs(1)[0] }

// redisAddrs are the addresses of n empty, independent redis-servers.
func redisAddrs(n int) []string { return servers.Addrs(n) }

// newReentrant is a Reentrant on an empty redis-server, as Example makes one; closed when the tests end.
func newReentrant(cfg rlock.Config) *rlock.Reentrant {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	locker, err := rlock.NewReentrant(rdb, cfg)
	if err != nil {
		panic(err)
	}
	closers = append(closers, locker.Close, rdb.Close)
	return locker
}
