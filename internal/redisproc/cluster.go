package redisproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
)

// DefaultNodeTimeout is the cluster-node-timeout of a Cluster node whose Options leave it zero: short, so
// that a killed master's replica takes over within a few seconds.
const DefaultNodeTimeout = time.Second

const (
	slotCount = 16384
	// clusterTimeout bounds StartCluster's wait for a formed cluster: redis-cli polls once a second while the
	// nodes meet, and the replicas then sync.
	clusterTimeout = 30 * time.Second
	pollInterval   = 50 * time.Millisecond
	roundTimeout   = time.Second // for checking every node once
	// formingNodeTimeout is every node's cluster-node-timeout while the nodes meet. A node drops a node
	// whose handshake has not finished within the node timeout (at least 1 s); on a loaded machine a
	// handshake can take longer than a test's short timeout, and redis-cli then waits for a join that
	// never comes.
	formingNodeTimeout = 15 * time.Second
)

// ClusterOptions configure a Redis Cluster.
type ClusterOptions struct {
	// Masters is the number of masters, each serving its share of the 16384 slots; at least 3, as
	// redis-cli requires.
	Masters int
	// ReplicasPerMaster is the number of replicas of each master; 0: none, so a killed master's slots
	// stay unserved.
	ReplicasPerMaster int
	// NodeTimeout is every node's cluster-node-timeout. Default DefaultNodeTimeout (1 s).
	NodeTimeout time.Duration
	// Dir holds the nodes' directories (node-0, node-1, ...); empty: a temporary directory per node, removed
	// by Stop.
	Dir string
}

// Cluster is a Redis Cluster of Cluster nodes on loopback ports. A node may be killed, paused and restarted
// like any Server: a restarted node rejoins with its nodes.conf, as a replica when another took over.
type Cluster struct {
	// Nodes are the nodes, the masters first, in the order they were created; after a failover a replica
	// may be master.
	Nodes []*Server
	cli   string
}

// StartCluster starts Masters*(1+ReplicasPerMaster) nodes, joins them with `redis-cli --cluster create`
// and waits until the cluster is healthy (WaitHealthy), every replica synchronised with its master so
// that a failover can happen.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.Masters < 3 || o.ReplicasPerMaster < 0 {
		return nil, fmt.Errorf("redisproc: a cluster needs at least 3 masters and no negative replicas, got %d and %d",
			o.Masters, o.ReplicasPerMaster)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found in PATH, which comes with redis-server: %w", ErrNotInstalled)
	}
	c := &Cluster{cli: cli}
	if err := c.start(o); err != nil {
		c.Stop()
		return nil, fmt.Errorf("start redis cluster: %w", err)
	}
	return c, nil
}

func (c *Cluster) start(o ClusterOptions) error {
	for i := range o.Masters * (1 + o.ReplicasPerMaster) {
		opts := Options{Cluster: true, NodeTimeout: o.NodeTimeout}
		if o.Dir != "" {
			opts.Dir = filepath.Join(o.Dir, "node-"+strconv.Itoa(i))
			if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
				return err
			}
		}
		s, err := Start(opts)
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), clusterTimeout,
		fmt.Errorf("cluster not formed after %v", clusterTimeout))
	defer cancel()
	if err := c.setNodeTimeout(ctx, formingNodeTimeout); err != nil {
		return err
	}
	if err := c.create(ctx, o.ReplicasPerMaster); err != nil {
		return err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return err
	}
	if err := c.setNodeTimeout(ctx, cmp.Or(o.NodeTimeout, DefaultNodeTimeout)); err != nil {
		return err
	}
	return c.orderMastersFirst(ctx)
}

// setNodeTimeout sets every node's cluster-node-timeout until it restarts (a restart reads its options).
func (c *Cluster) setNodeTimeout(ctx context.Context, d time.Duration) error {
	for _, s := range c.Nodes {
		cl := adminClient(s)
		err := cl.ConfigSet(ctx, "cluster-node-timeout", strconv.FormatInt(d.Milliseconds(), 10)).Err()
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("%s: set cluster-node-timeout: %w", s.Addr, err)
		}
	}
	return nil
}

// create joins the nodes: the first Masters become masters and share the slots, the others their replicas.
func (c *Cluster) create(ctx context.Context, replicas int) error {
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, c.cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w; output:\n%s", err, out)
	}
	return nil
}

// orderMastersFirst moves the masters to the front of Nodes, keeping the order of creation otherwise.
func (c *Cluster) orderMastersFirst(ctx context.Context) error {
	view, err := c.view(ctx, c.Nodes[0])
	if err != nil {
		return err
	}
	masters := map[string]bool{}
	for _, n := range view {
		masters[n.addr] = n.has("master")
	}
	slices.SortStableFunc(c.Nodes, func(a, b *Server) int {
		return cmpBool(masters[b.Addr], masters[a.Addr])
	})
	return nil
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Addrs are every node's host:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// URL is the cluster's URL as redis.ParseClusterURL reads it: "redis://h1:p1?addr=h2:p2&addr=h3:p3...".
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
}

// MasterFor returns the node that is master of key's slot now, as the first running node sees the
// cluster. It fails when that master is not running or counted as failing (a failover is under way).
func (c *Cluster) MasterFor(ctx context.Context, key string) (*Server, error) {
	running := c.running()
	if len(running) == 0 {
		return nil, errors.New("redisproc: no cluster node is running")
	}
	cl := adminClient(running[0])
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster keyslot %q on %s: %w", key, running[0].Addr, err)
	}
	view, err := c.view(ctx, running[0])
	if err != nil {
		return nil, err
	}
	for _, n := range view {
		if n.has("master") && n.serves(int(slot)) {
			return c.liveMaster(n, slot)
		}
	}
	return nil, fmt.Errorf("redisproc: slot %d of %q has no master in the view of %s", slot, key, running[0].Addr)
}

func (c *Cluster) liveMaster(n clusterNode, slot int64) (*Server, error) {
	s := c.node(n.addr)
	if s == nil || s.Pid() == 0 || n.failing() {
		return nil, fmt.Errorf("redisproc: the master of slot %d, %s, is down", slot, n.addr)
	}
	return s, nil
}

// Failover makes a replica of key's master take over from it, as an operator does before maintenance
// (CLUSTER FAILOVER: the replica catches up with the master first, so no write is lost; the master stays
// up, as a replica). It returns the new master once the cluster is healthy again.
func (c *Cluster) Failover(ctx context.Context, key string) (*Server, error) {
	old, err := c.MasterFor(ctx, key)
	if err != nil {
		return nil, err
	}
	replica, err := c.replicaOf(ctx, old)
	if err != nil {
		return nil, err
	}
	cl := adminClient(replica)
	defer cl.Close()
	if err := cl.Do(ctx, "cluster", "failover").Err(); err != nil {
		return nil, fmt.Errorf("cluster failover on %s: %w", replica.Addr, err)
	}
	for {
		if now, _ := c.MasterFor(ctx, key); now == replica {
			return replica, c.WaitHealthy(ctx)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisproc: %s did not take over from %s: %w; log tail of %[1]s:\n%s", replica.Addr,
				old.Addr, context.Cause(ctx), strings.Join(replica.LogTail(10), "\n"))
		case <-time.After(pollInterval):
		}
	}
}

// replicaOf returns a running replica of master, as master's view of the cluster shows it. The view may
// not list a replica yet just after the cluster came up (a CI run): it is read again until ctx ends.
func (c *Cluster) replicaOf(ctx context.Context, master *Server) (*Server, error) {
	for {
		view, err := c.view(ctx, master)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(view, func(n clusterNode) bool { return n.has("myself") })
		for _, n := range view {
			if s := c.node(n.addr); i >= 0 && n.masterID == view[i].id && s != nil && s.Pid() != 0 {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisproc: master %s has no running replica: %w", master.Addr, context.Cause(ctx))
		case <-time.After(pollInterval):
		}
	}
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// clusterArgs make a Cluster node: its state in nodes.conf, its bus on busPort (when the port is free to
// choose: redis's default, port+10000, may exceed 65535). A replica takes over however long it was cut off
// from its master (validity factor 0): tests kill masters at any moment. The slots of the other masters
// stay served while one has none (require-full-coverage no). A replica syncs at once, not after the 5 s
// that a master waits by default for more replicas to share its diskless transfer.
func (s *Server) clusterArgs() []string {
	if !s.opts.Cluster {
		return nil
	}
	timeout := cmp.Or(s.opts.NodeTimeout, DefaultNodeTimeout)
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
		"--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no",
		"--repl-diskless-sync-delay", "0"}
	if s.busPort != "" {
		args = append(args, "--cluster-port", s.busPort)
	}
	return args
}

// freePorts returns a free loopback address, and for a cluster node a second free port for its bus.
func freePorts(cluster bool) (addr, busPort string, err error) {
	if addr, err = childproc.FreeAddr(); err != nil || !cluster {
		return addr, "", err
	}
	for busPort == "" || strings.HasSuffix(addr, ":"+busPort) {
		bus, err := childproc.FreeAddr()
		if err != nil {
			return "", "", err
		}
		busPort = bus[strings.LastIndexByte(bus, ':')+1:]
	}
	return addr, busPort, nil
}
