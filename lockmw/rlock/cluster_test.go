package rlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// On a Redis Cluster (sharded unlock messages by default), a waiter is woken by the holder's SPUBLISH on
// the master of the lock's slot, whichever master that is, and no PUBLISH is broadcast.
func TestClusterWaiterWokenBySPublish(t *testing.T) {
	c := redistest.StartCluster(t)
	holder, waiter := newClusterLocker(t, c, Config{}), newClusterLocker(t, c, Config{})
	var waits []time.Duration
	for _, key := range keysOnEveryMaster(t, c, 1) {
		for range 5 {
			waits = append(waits, wakeUp(t, holder, waiter, waiter.e, key))
		}
	}
	slices.Sort(waits)
	t.Logf("waiter held the lock after the release returned: median %v, max %v", waits[len(waits)/2], waits[len(waits)-1])
	if median := waits[len(waits)/2]; median >= wokenWithin {
		t.Errorf("median wake-up %v after the release, want < %v", median, wokenWithin)
	}
	for _, m := range c.Nodes[:3] {
		calls := commandCalls(t, nodeClient(t, m.Addr))
		if calls["spublish"] == 0 || calls["ssubscribe"] == 0 || calls["publish"] != 0 || calls["subscribe"] != 0 {
			t.Errorf("master %s: spublish %d, ssubscribe %d, publish %d, subscribe %d calls; want only sharded ones",
				m.Addr, calls["spublish"], calls["ssubscribe"], calls["publish"], calls["subscribe"])
		}
	}
}

// Two lockers ("processes") with many goroutines each increment counters under the locks of keys spread
// over every master: no update is lost. Without the locks the same sections lose updates, so the test can
// tell.
func TestClusterMutualExclusion(t *testing.T) {
	const goroutines, perGoroutine = 8, 40
	c := redistest.StartCluster(t)
	keys := keysOnEveryMaster(t, c, 2)
	rdb := c.Client()
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
			ctx := context.Background()
			counter := func(key string) string { return "count:{" + key + "}:" + strconv.FormatBool(locked) }
			want := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, 2*goroutines)
			for range 2 {
				l := newClusterLocker(t, c, Config{})
				for g := range goroutines {
					for i := range perGoroutine {
						want[keys[(g+i)%len(keys)]]++
					}
					wg.Go(func() {
						for i := range perGoroutine {
							key := keys[(g+i)%len(keys)]
							if err := clusterSection(ctx, l, rdb, key, counter(key), locked); err != nil {
								errs <- err
								return
							}
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			lost := 0
			for key, n := range want {
				got, _ := rdb.Get(ctx, counter(key)).Int()
				if locked && got != n {
					t.Errorf("%s: %d of %d locked sections counted", key, got, n)
				}
				lost += n - got
			}
			if !locked && lost == 0 {
				t.Fatal("no update lost without the locks: the test cannot detect lost updates")
			}
			t.Logf("%d updates lost", lost)
		})
	}
}

// clusterSection increments counter by a read and a write, under key's lock when locked.
func clusterSection(ctx context.Context, l *Reentrant, rdb redis.Cmdable, key, counter string, locked bool) error {
	if !locked {
		return increment(ctx, rdb, counter)
	}
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	err = increment(lease.Context(), rdb, counter)
	return errors.Join(err, lease.Release(ctx))
}

func increment(ctx context.Context, rdb redis.Cmdable, counter string) error {
	v, err := rdb.Get(ctx, counter).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return rdb.Set(ctx, counter, v+1, 0).Err()
}

// A manual failover moves the lock's slot to another master; the old one, now its replica, drops the
// waiter's sharded subscription (SUNSUBSCRIBE), and the waiter subscribes again (on the new master, or on
// the old one if the client has not learned of the move yet: a replica delivers its master's SPUBLISH
// too), so the release wakes it instead of leaving it to the holder's lease.
func TestClusterFailoverMovesTheSubscription(t *testing.T) {
	const lease = 10 * time.Second
	c := redistest.StartCluster(t)
	holder, waiter := newClusterLocker(t, c, Config{Lease: lease}), newClusterLocker(t, c, Config{Lease: lease})
	ctx := context.Background()
	const key = "sku-failover"
	n := namesFor(key)
	held := mustAcquire(t, holder, ctx, key)
	got := acquireLater(t, waiter, ctx, key)
	waitSleeping(t, waiter.e, key)
	old := c.MasterOf(n.lock)
	start := time.Now()
	now := c.Failover(n.lock)
	// The waiter's subscription must have moved: gone from the old master (which drops it when it gives up
	// the slot) and back on the new one. Counting both nodes together once let the test go on while the
	// old subscription was still there, about to be dropped, and the release's message then came between
	// the drop and the new subscription (a CI run: the waiter woke after its lease, 10 s).
	moved := func() bool {
		return shardSubscribers(t, old.Addr, n.channel) == 0 && shardSubscribers(t, now.Addr, n.channel) == 1
	}
	for end := time.Now().Add(5 * time.Second); !moved(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("subscribers after the failover: %d on the old master, %d on the new one; want the waiter on the new one",
				shardSubscribers(t, old.Addr, n.channel), shardSubscribers(t, now.Addr, n.channel))
		}
	}
	t.Logf("the waiter subscribed again %v after the failover began", time.Since(start))
	time.Sleep(20 * time.Millisecond) // the waiter's attempt after the new confirmation found the lock held
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case at, ok := <-got:
		if !ok {
			t.FailNow()
		}
		t.Logf("waiter held the lock %v after the release", at.Sub(released))
		if wait := at.Sub(released); wait > time.Second {
			t.Fatalf("waiter woken %v after the release, want it woken by the unlock message", wait)
		}
	case <-time.After(2 * lease):
		t.Fatal("waiter did not get the lock")
	}
}

// A channel's connection that Redis did not confirm (its SSUBSCRIBE went to a node that does not serve
// the slot, which answers MOVED) is opened anew by the sweep, on the master of the slot.
func TestUnconfirmedChannelConnectionIsOpenedAnew(t *testing.T) {
	c := redistest.StartCluster(t)
	n := startNotifier(c.Client(), true, func(string) {})
	t.Cleanup(func() { _ = n.close() })
	channel := namesFor("sku-1").channel
	waitReady(t, n.hold(channel))
	master, wrong := c.MasterOf(channel), c.Nodes[0]
	if wrong == master {
		wrong = c.Nodes[1]
	}
	n.closeOwn(channel)
	bogus := n.receiveOn(nodeClient(t, wrong.Addr).SSubscribe(context.Background(), channel))
	bogus.opened = time.Now().Add(-confirmWithin)
	n.mu.Lock()
	n.conns[channel] = bogus
	n.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // the wrong node's MOVED
	if subs := shardSubscribers(t, master.Addr, channel) + shardSubscribers(t, wrong.Addr, channel); subs != 0 {
		t.Fatalf("%d subscribers before the sweep, want none", subs)
	}
	n.sweep()
	for end := time.Now().Add(2 * time.Second); shardSubscribers(t, master.Addr, channel) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the sweep did not subscribe the channel again on its master")
		}
	}
}

func shardSubscribers(t *testing.T, addr, channel string) int64 {
	return nodeClient(t, addr).PubSubShardNumSub(context.Background(), channel).Val()[channel]
}

// ShardedPubSub on a single server: ShardedOn publishes with SPUBLISH and listens with SSUBSCRIBE (Redis 7
// has sharded pub/sub without a cluster too), ShardedAuto and ShardedOff with PUBLISH and SUBSCRIBE. Either
// way a waiter is woken by the release and by ForceRelease.
func TestShardedPubSubOnSingleServer(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		mode                       ShardedMode
		publish, subscribe, unused string
	}{
		{"ShardedOn is sharded", ShardedOn, "spublish", "ssubscribe", "publish"},
		{"ShardedAuto on a single server is plain", ShardedAuto, "publish", "subscribe", "spublish"},
		{"ShardedOff is plain", ShardedOff, "publish", "subscribe", "spublish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			holder, waiter := newLocker(t, s, Config{ShardedPubSub: tc.mode}), newLocker(t, s, Config{ShardedPubSub: tc.mode})
			if wait := wakeUp(t, holder, waiter, waiter.e, "sku-1"); wait > wokenWithin {
				t.Errorf("waiter woken %v after the release, want < %v", wait, wokenWithin)
			}
			forced := func(ctx context.Context, _ Lease) error { _, err := holder.ForceRelease(ctx, "sku-1"); return err }
			if wait := wakeUpAfter(t, holder, waiter, waiter.e, "sku-1", forced); wait > wokenWithin {
				t.Errorf("waiter woken %v after ForceRelease, want < %v", wait, wokenWithin)
			}
			calls := commandCalls(t, s.Client())
			if calls[tc.publish] == 0 || calls[tc.subscribe] == 0 || calls[tc.unused] != 0 {
				t.Errorf("%s %d, %s %d, %s %d calls; want only the first two", tc.publish, calls[tc.publish],
					tc.subscribe, calls[tc.subscribe], tc.unused, calls[tc.unused])
			}
		})
	}
}

// Redlock with ShardedOn publishes with SPUBLISH on each master, and its waiters listen with SSUBSCRIBE.
func TestShardedPubSubRedlock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	newRedlock := func() *Redlock {
		clients := []redis.UniversalClient{servers[0].Client(), servers[1].Client(), servers[2].Client()}
		l, err := NewRedlock(clients, Config{ShardedPubSub: ShardedOn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, waiter := newRedlock(), newRedlock()
	if wait := wakeUp(t, holder, waiter, waiter.e, "sku-1"); wait > wokenWithin {
		t.Errorf("waiter woken %v after the release, want < %v", wait, wokenWithin)
	}
	// A release returns once a majority released: the last master's may still be on its way.
	for _, s := range servers {
		calls := commandCalls(t, s.Client())
		for deadline := time.Now().Add(5 * time.Second); calls["spublish"] == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			calls = commandCalls(t, s.Client())
		}
		if calls["spublish"] == 0 || calls["publish"] != 0 {
			t.Errorf("master %s: %d spublish, %d publish calls; want only spublish", s.Addr, calls["spublish"], calls["publish"])
		}
	}
}

// ShardedPubSub must name a mode.
func TestValidateRejectsUnknownShardedMode(t *testing.T) {
	for _, m := range []ShardedMode{-1, ShardedOff + 1} {
		if err := (Config{ShardedPubSub: m}).Validate(); err == nil {
			t.Errorf("Validate accepted ShardedPubSub %d", m)
		}
	}
}

// wokenWithin bounds a waiter's wake-up after a release: far below its fallback retry (the holder's lease,
// 30 s), so only the unlock message can have woken it, and loose enough for a loaded machine (CI once saw
// 62 ms for Redlock). How fast the wake-up is, the benchmarks measure (the hot key comparisons).
const wokenWithin = 500 * time.Millisecond

// wakeUp has holder hold key while waiter waits for it, then releases it, and returns how long after the
// release returned the waiter held the lock.
func wakeUp(t *testing.T, holder, waiter Locker, we *engine, key string) time.Duration {
	t.Helper()
	return wakeUpAfter(t, holder, waiter, we, key, func(ctx context.Context, l Lease) error { return l.Release(ctx) })
}

// wakeUpAfter is wakeUp with free as the release.
func wakeUpAfter(t *testing.T, holder, waiter Locker, we *engine, key string, free func(context.Context, Lease) error) time.Duration {
	t.Helper()
	ctx := context.Background()
	held := mustAcquire(t, holder, ctx, key)
	got := acquireLater(t, waiter, ctx, key)
	waitSleeping(t, we, key)
	if err := free(ctx, held); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case at, ok := <-got:
		if !ok {
			t.FailNow()
		}
		return at.Sub(released)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken within 10 s of the release")
	}
	return 0
}

// waitSleeping waits until an acquisition of key is queued in e, subscribed to the key's unlock channel on
// every notifier, and has had the time to find the lock held.
func waitSleeping(t *testing.T, e *engine, key string) {
	t.Helper()
	channel := e.cfg.names(key).channel
	waiting := func() bool {
		e.queue.mu.Lock()
		queued := e.queue.keys[channel] != nil
		e.queue.mu.Unlock()
		return queued && !slices.ContainsFunc(e.notifiers, func(n *notifier) bool { return !n.subscribed(channel) })
	}
	for end := time.Now().Add(5 * time.Second); !waiting(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no acquisition of %s waits, subscribed", key)
		}
	}
	time.Sleep(20 * time.Millisecond)
}

// newClusterLocker returns a locker with its own cluster client, as a separate process would have.
func newClusterLocker(t testing.TB, c *redistest.Cluster, cfg Config) *Reentrant {
	t.Helper()
	l, err := NewReentrant(c.Client(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// keysOnEveryMaster returns keys whose locks are on each of the three masters, perMaster each.
func keysOnEveryMaster(t *testing.T, c *redistest.Cluster, perMaster int) []string {
	t.Helper()
	byMaster := map[string]int{}
	var keys []string
	for i := 0; len(keys) < 3*perMaster; i++ {
		if i == 1000 {
			t.Fatalf("%d keys found, want %d on each master", len(keys), perMaster)
		}
		key := fmt.Sprint("sku-", i)
		if m := c.MasterOf(namesFor(key).lock).Addr; byMaster[m] < perMaster {
			byMaster[m]++
			keys = append(keys, key)
		}
	}
	return keys
}

func nodeClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
