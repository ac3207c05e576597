package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterMasters = 3
	slotCount      = 16384
	// clusterNodeTimeout is every node's cluster-node-timeout: short, so a failover completes soon.
	clusterNodeTimeout = time.Second
	// clusterTimeout bounds the wait for a formed cluster: redis-cli polls once a second while the nodes
	// meet, and the replicas then sync.
	clusterTimeout = 30 * time.Second
	pollInterval   = 50 * time.Millisecond
	// formingNodeTimeout is every node's cluster-node-timeout while the nodes meet. A node drops a node
	// whose handshake has not finished within the node timeout (at least 1 s); on a loaded machine a
	// handshake can take longer than clusterNodeTimeout, and redis-cli then waits for a join that never
	// comes.
	formingNodeTimeout = 15 * time.Second
)

// Cluster is a Redis Cluster of a test: three masters, each with a replica. Its nodes use CLUSTER SHARDS,
// so it needs Redis 7.
type Cluster struct {
	// Nodes are the nodes, the masters first; after a failover a replica may be master.
	Nodes []*Server
	t     testing.TB
}

// StartCluster starts a Redis Cluster and registers its cleanup with t. It returns once every slot is
// served and every replica is in sync with its master.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli, which comes with redis-server: %v", errNotInstalled)
	}
	c := &Cluster{t: t}
	for range 2 * clusterMasters {
		c.Nodes = append(c.Nodes, Start(t, func(o *options) { o.cluster = true }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c.setNodeTimeout(ctx, formingNodeTimeout)
	// redis-cli makes the first nodes masters and the others their replicas.
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v; output:\n%s", err, out)
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c.setNodeTimeout(ctx, clusterNodeTimeout)
	return c
}

// setNodeTimeout sets every node's cluster-node-timeout until it restarts (a restart reads its options).
func (c *Cluster) setNodeTimeout(ctx context.Context, d time.Duration) {
	c.t.Helper()
	for _, s := range c.Nodes {
		cl := adminClient(s.Addr)
		err := cl.ConfigSet(ctx, "cluster-node-timeout", strconv.FormatInt(d.Milliseconds(), 10)).Err()
		_ = cl.Close()
		if err != nil {
			c.t.Fatalf("redistest: %s: set cluster-node-timeout: %v", s.Addr, err)
		}
	}
}

// clusterArgs make a cluster node: its state in nodes.conf, its bus on busPort (redis's default,
// port+10000, may exceed 65535). A replica takes over however long it was cut off from its master
// (validity factor 0), and syncs at once rather than after the 5 s a master waits for more replicas.
func (s *Server) clusterArgs() []string {
	if !s.opts.cluster {
		return nil
	}
	return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
		"--cluster-port", s.busPort, "--cluster-replica-validity-factor", "0",
		"--cluster-require-full-coverage", "no", "--repl-diskless-sync-delay", "0"}
}

// Client returns a new cluster client, closed when the test ends. Like Server.Client it honours context
// deadlines, and it reloads the slot map every half second, so it learns of a failover soon.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), ContextTimeoutEnabled: true,
		DisableIdentity: true, MaxRedirects: 8, MaxRetryBackoff: 100 * time.Millisecond,
		ClusterStateReloadInterval: 500 * time.Millisecond})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// MasterOf returns the node that is master of key's slot now.
func (c *Cluster) MasterOf(key string) *Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	master, _, err := c.shardOf(ctx, key)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return master
}

// Failover makes the replica of key's master take over from it, as an operator does before maintenance
// (CLUSTER FAILOVER: the replica catches up with the master first, so no write is lost; the old master
// stays up, as a replica). It returns the new master once the cluster is healthy again.
func (c *Cluster) Failover(key string) *Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, replica, err := c.shardOf(ctx, key)
	if err == nil {
		err = clusterFailover(ctx, replica.Addr)
	}
	for err == nil {
		if now, _, _ := c.shardOf(ctx, key); now == replica {
			err = c.waitHealthy(ctx)
			break
		}
		err = sleep(ctx)
	}
	if err != nil {
		c.t.Fatalf("redistest: failover of %q: %v", key, err)
	}
	return replica
}

func clusterFailover(ctx context.Context, addr string) error {
	cl := adminClient(addr)
	defer cl.Close()
	return cl.ClusterFailover(ctx).Err()
}

// shardOf returns the master of key's slot and its replica, as the first node sees the cluster.
func (c *Cluster) shardOf(ctx context.Context, key string) (master, replica *Server, err error) {
	cl := adminClient(c.Nodes[0].Addr)
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("cluster keyslot %q: %w", key, err)
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("cluster shards: %w", err)
	}
	for _, sh := range shards {
		if slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
			master, replica = c.node(sh, "master"), c.node(sh, "replica")
		}
	}
	if master == nil || replica == nil {
		return nil, nil, fmt.Errorf("slot %d of %q has no online master with a replica", slot, key)
	}
	return master, replica, nil
}

// node is the online node of the shard in role.
func (c *Cluster) node(sh redis.ClusterShard, role string) *Server {
	for _, n := range sh.Nodes {
		addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
		if i := slices.IndexFunc(c.Nodes, func(s *Server) bool { return s.Addr == addr }); n.Role == role &&
			n.Health == "online" && i >= 0 {
			return c.Nodes[i]
		}
	}
	return nil
}

// waitHealthy waits until every running node says cluster_state:ok and sees every running node online
// and every slot on an online master, and each replica is in sync with its master.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	for {
		err := c.unhealthy(ctx)
		if err == nil {
			return nil
		}
		if sleep(ctx) != nil {
			return fmt.Errorf("redis cluster not healthy: %w: %w", context.Cause(ctx), err)
		}
	}
}

// unhealthy says what is wrong with the first node found unhealthy.
func (c *Cluster) unhealthy(ctx context.Context) error {
	running := 0
	for _, s := range c.Nodes {
		if s.running() {
			running++
		}
	}
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		if err := nodeHealthy(ctx, s.Addr, running); err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return nil
}

func nodeHealthy(ctx context.Context, addr string, running int) error {
	cl := adminClient(addr)
	defer cl.Close()
	if info, err := cl.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(info, "cluster_state:ok") {
		return errors.Join(errors.New("cluster_state is not ok"), err)
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	online, served := 0, int64(0)
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Health != "online" {
				continue
			}
			online++
			for _, r := range sh.Slots {
				if n.Role == "master" {
					served += r.End - r.Start + 1
				}
			}
		}
	}
	if online < running || served < slotCount {
		return fmt.Errorf("sees %d of %d running nodes online, %d of %d slots on them", online, running, served, slotCount)
	}
	info, err := cl.Info(ctx, "replication").Result()
	if err == nil && strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
		err = errors.New("replica not in sync with its master")
	}
	return err
}

func (c *Cluster) addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// adminClient is a client of one node for the checks: it fails fast instead of retrying.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, ContextTimeoutEnabled: true, DisableIdentity: true})
}

// sleep waits pollInterval, or returns ctx's error when it ends first.
func sleep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pollInterval):
		return nil
	}
}
