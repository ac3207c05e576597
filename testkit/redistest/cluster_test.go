package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Keys of different slots written through the cluster client land on every master, each key on the
// master MasterOf names for it.
func TestClusterSpreadsKeysOverItsMasters(t *testing.T) {
	c := redistest.StartCluster(t)
	if len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, want 3 masters and 3 replicas", len(c.Addrs()))
	}
	cl := c.Client()
	ctx := context.Background()
	const keys = 100
	for i := range keys {
		if err := cl.Set(ctx, fmt.Sprint("key-", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, m := range c.Nodes[:3] {
		n := nodeClient(t, m.Addr).DBSize(ctx).Val()
		if n == 0 {
			t.Errorf("master %s holds no key", m.Addr)
		}
		total += int(n)
	}
	if total != keys {
		t.Errorf("the masters hold %d keys, want %d", total, keys)
	}
	for i := range 10 {
		key := fmt.Sprint("key-", i)
		// Asked directly, a node that does not serve the key's slot answers MOVED.
		if got, err := nodeClient(t, c.MasterOf(key).Addr).Get(ctx, key).Int(); err != nil || got != i {
			t.Errorf("%s on MasterOf(%[1]s): %d, %v; want %d", key, got, err, i)
		}
	}
}

// A killed master's replica takes over within a bounded time, with the data the master had replicated.
func TestKilledMasterIsReplacedByItsReplica(t *testing.T) {
	c := redistest.StartCluster(t)
	cl := c.Client()
	ctx := context.Background()
	const key = "stock:{sku-1}"
	master, err := cl.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var wait *redis.Cmd
	if _, err := master.Pipelined(ctx, func(p redis.Pipeliner) error { // WAIT counts this connection's writes
		p.Set(ctx, key, "v", 0)
		wait = p.Do(ctx, "wait", 1, 1000)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if acked, err := wait.Int(); err != nil || acked != 1 {
		t.Fatalf("WAIT 1 1000 after the SET: %d replicas acknowledged, %v; want 1", acked, err)
	}
	old := c.KillMasterOf(key)
	killed := time.Now()
	c.WaitHealthy(15 * time.Second)
	t.Logf("replica took over %v after the kill", time.Since(killed))
	if now := c.MasterOf(key); now == old {
		t.Fatalf("%s is still master of %s", old.Addr, key)
	}
	readCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if got, err := cl.Get(readCtx, key).Result(); err != nil || got != "v" {
		t.Fatalf("after the failover: %s = %q, %v; want v", key, got, err)
	}
}

// A manual failover hands key's slot to the replica and keeps the old master running, as a replica.
func TestFailoverMakesTheOldMasterAReplica(t *testing.T) {
	c := redistest.StartCluster(t)
	cl := c.Client()
	ctx := context.Background()
	const key = "stock:{sku-2}"
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.MasterOf(key)
	start := time.Now()
	now := c.Failover(key)
	t.Logf("failover took %v", time.Since(start))
	if now == old || c.MasterOf(key) != now {
		t.Fatalf("master of %s: %s before, %s after Failover, %s now", key, old.Addr, now.Addr, c.MasterOf(key).Addr)
	}
	if role, err := nodeClient(t, old.Addr).Do(ctx, "role").Slice(); err != nil || role[0] != "slave" {
		t.Fatalf("old master's ROLE: %v, %v; want slave", role, err)
	}
	if got, err := cl.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("after the failover: %s = %q, %v; want v", key, got, err)
	}
}

// Without a replica, a killed master's slots stay unserved: WaitHealthy says so, with the log of the node
// that reported it.
func TestWaitHealthyReportsUnservedSlots(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithShards(3, 0))
	c.Nodes[0].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.Cluster.WaitHealthy(ctx)
	if err == nil || !strings.Contains(err.Error(), "slots on them") || !strings.Contains(err.Error(), "log tail of") {
		t.Fatalf("WaitHealthy with a dead master and no replica: %v; want unserved slots and a log tail", err)
	}
	t.Log(err)
}

// A test that ends early still stops every node of its cluster, a paused one too.
func TestClusterCleanupStopsNodes(t *testing.T) {
	var pids []int
	t.Run("ends early", func(t *testing.T) {
		c := redistest.StartCluster(t)
		for _, s := range c.Nodes {
			pids = append(pids, s.Pid())
		}
		if err := c.Nodes[1].Pause(); err != nil {
			t.Fatal(err)
		}
		t.Skip("ends the subtest early, as a failure would")
	})
	if len(pids) != 6 {
		t.Fatalf("%d nodes started, want 6", len(pids))
	}
	for _, pid := range pids {
		if pid == 0 || alive(pid) {
			t.Fatalf("cluster node pid %d still running after its test ended", pid)
		}
	}
}

func nodeClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
