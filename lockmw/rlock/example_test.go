package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	outer, err := locker.Acquire(ctx, "SKU-2")
	if err != nil {
		panic(err)
	}
	// The lease's context carries its owner: a nested call under it re-enters at once instead of waiting for
	// itself, and keeps the token.
	inner, err := locker.Acquire(outer.Context(), "SKU-2")
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	// An order of several SKUs takes all their locks or none, in sorted order, within one wait for the set.
	wait := rlock.WithWaitDeadline(ctx, time.Now().Add(5*time.Second))
	basket, err := rlock.AcquireAll(wait, locker, []string{"SKU-4", "SKU-3", "SKU-4"})
	if err != nil {
		panic(err) // errors.Is(err, rlock.ErrNotObtained): retry the order later
	}
	defer basket.Release(ctx)
	// Do the guarded work under basket.Context(), which ends if any of the locks is lost.
	for _, key := range basket.Keys() {
		fmt.Println("holding", key, "with fencing token", basket.Token(key))
	}
	// Output:
	// holding SKU-3 with fencing token 1
	// holding SKU-4 with fencing token 1
}

func ExampleReentrant_TryAcquire() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	holder, err := locker.Acquire(ctx, "SKU-5")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "SKU-5") // another owner: no owner in ctx
	fmt.Println(err)
	_ = holder.Release(ctx)

	lease, err := locker.TryAcquire(ctx, "SKU-5")
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{MaxWait: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	holder, err := locker.Acquire(ctx, "SKU-6")
	if err != nil {
		panic(err)
	}
	defer holder.Release(ctx)
	_, err = locker.Acquire(ctx, "SKU-6")
	fmt.Println(err)
	fmt.Println(errors.Is(err, rlock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// rlock: lock not obtained: waited the maximum of 50ms: context deadline exceeded
	// true true
}

func ExampleLease_Extend() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{Lease: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "SKU-7")
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
	for _, addr := range redlockAddrs { // three independent masters, no replication between them
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

func ExampleConfig_keyPrefix() {
	// Locks of another application on the same Redis: its own names, and the same rules for the keys
	// that follow from a lock's name, so a Redisson client shares the lock with getLock("app:lock:{SKU-1}").
	cfg := rlock.Config{KeyPrefix: "app:lock:"}
	fmt.Println(cfg.LockKey("SKU-1"))
	fmt.Println(cfg.TokenKey("SKU-1"))
	fmt.Println(rlock.LockKey("SKU-1")) // the default layout
	// Output:
	// app:lock:{SKU-1}
	// redisson_lock_token:app:lock:{SKU-1}
	// lock:{SKU-1}
}

// The examples run against redis-servers of their own; in your code, the addresses are where your Redis runs
// (such as "localhost:6379"). Each example locks keys of its own, so that its fencing tokens start at 1
// whichever examples ran before: examples run once per test binary (whatever -count says).
var (
	addr         string   // one Redis
	redlockAddrs []string // three independent masters, no replication between them
)

func TestMain(m *testing.M) {
	var servers redistest.Examples
	all := servers.Addrs(4)
	addr, redlockAddrs = all[0], all[1:]
	code := m.Run()
	servers.Stop()
	os.Exit(code)
}
