package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// DefaultClusterNodeTimeout is the cluster-node-timeout of a test cluster: a killed master's replica
// takes over about 2-3 s later.
const DefaultClusterNodeTimeout = time.Second

// ClusterOption configures a cluster.
type ClusterOption func(*redisproc.ClusterOptions)

// WithShards makes a cluster of masters masters (at least 3), each with replicasPerMaster replicas.
func WithShards(masters, replicasPerMaster int) ClusterOption {
	return func(o *redisproc.ClusterOptions) { o.Masters, o.ReplicasPerMaster = masters, replicasPerMaster }
}

// Cluster is a Redis Cluster of a test.
type Cluster struct {
	*redisproc.Cluster
	t testing.TB
}

// StartCluster starts a Redis Cluster, by default 3 masters with a replica each and a node timeout of
// DefaultClusterNodeTimeout, and registers its cleanup with t. It returns once every slot is served and
// every replica is in sync.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	o := redisproc.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: DefaultClusterNodeTimeout, Dir: t.TempDir()}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := redisproc.StartCluster(o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Stop)
	return &Cluster{Cluster: c, t: t}
}

// Client returns a new cluster client, closed when the test ends. Like Server.Client it honours context
// deadlines. It retries soon (at most 100 ms apart), and reloads the slot map when it is older than half a
// second: go-redis reloads it on a MOVED reply, but a dead master gives none, and by default (60 s) the
// client would keep dialing it long after its replica took over.
func (c *Cluster) Client() *redis.ClusterClient {
	opts, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	opts.ContextTimeoutEnabled, opts.DisableIdentity = true, true
	opts.MaxRedirects, opts.MaxRetryBackoff = 8, 100*time.Millisecond
	opts.ClusterStateReloadInterval = 500 * time.Millisecond
	cl := redis.NewClusterClient(opts)
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// MasterOf returns the node that is master of key's slot now.
func (c *Cluster) MasterOf(key string) *redisproc.Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.MasterFor(ctx, key)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return s
}

// KillMasterOf kills (SIGKILL) the master of key's slot and returns it. Its replica takes over once the
// other nodes count it as failed (WaitHealthy waits for that); Restart brings it back as a replica.
func (c *Cluster) KillMasterOf(key string) *redisproc.Server {
	c.t.Helper()
	s := c.MasterOf(key)
	s.Kill()
	return s
}

// Failover makes a replica of key's master take over from it (redisproc.Cluster.Failover: no write is
// lost, the old master stays up as a replica) and returns the new master.
func (c *Cluster) Failover(key string) *redisproc.Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := c.Cluster.Failover(ctx, key)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return s
}

// WaitHealthy waits up to within until the cluster is healthy again (redisproc.Cluster.WaitHealthy: every
// slot served by a running master, every replica in sync), and fails the test when it is not.
func (c *Cluster) WaitHealthy(within time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := c.Cluster.WaitHealthy(ctx); err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
}
