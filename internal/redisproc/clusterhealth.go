package redisproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitHealthy waits until every running node says cluster_state:ok, sees every running node and every
// slot served by a running master that no node counts as failing, and, when a replica, is in sync with
// its master (master_link_status:up). It fails with the cause of ctx, the last problem found and the log
// tail of the node that had it.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		s, err := c.checkRound(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster not healthy: %w: %s", context.Cause(ctx), problem(s, err))
		case <-tick.C:
		}
	}
}

// checkRound checks every running node within roundTimeout, not cut off by ctx's deadline: a problem
// found is the nodes', not a check cut short.
func (c *Cluster) checkRound(ctx context.Context) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), roundTimeout)
	defer cancel()
	return c.unhealthyNode(ctx)
}

// problem says what is wrong with node s, and shows its log tail.
func problem(s *Server, err error) string {
	if s == nil {
		return err.Error()
	}
	return fmt.Sprintf("%s: %v; log tail of %[1]s:\n%s", s.Addr, err, strings.Join(s.LogTail(10), "\n"))
}

// unhealthyNode returns the first running node that is not healthy, and why.
func (c *Cluster) unhealthyNode(ctx context.Context) (*Server, error) {
	running := c.running()
	if len(running) == 0 {
		return nil, errors.New("no node is running")
	}
	for _, s := range running {
		if err := c.nodeHealthy(ctx, s, running); err != nil {
			return s, err
		}
	}
	return nil, nil
}

func (c *Cluster) nodeHealthy(ctx context.Context, s *Server, running []*Server) error {
	cl := adminClient(s)
	defer cl.Close()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster_state is not ok")
	}
	view, err := c.view(ctx, s)
	if err != nil {
		return err
	}
	if err := checkView(view, running); err != nil {
		return err
	}
	return replicaInSync(ctx, cl, view)
}

// checkView checks that a node sees every running node as not failing, and all slots on them.
func checkView(view []clusterNode, running []*Server) error {
	live := map[string]bool{}
	for _, s := range running {
		live[s.Addr] = true
	}
	seen, served := 0, 0
	for _, n := range view {
		if !live[n.addr] || n.failing() {
			continue
		}
		seen++
		if n.has("master") {
			served += n.slotCount()
		}
	}
	if seen < len(running) || served < slotCount {
		return fmt.Errorf("sees %d of %d running nodes, %d of %d slots on them", seen, len(running), served, slotCount)
	}
	return nil
}

// replicaInSync checks, on a replica, that its link to its master is up.
func replicaInSync(ctx context.Context, cl *redis.Client, view []clusterNode) error {
	i := slices.IndexFunc(view, func(n clusterNode) bool { return n.has("myself") })
	if i < 0 || !view[i].has("slave") {
		return nil
	}
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica of %s not in sync", view[i].masterID)
	}
	return nil
}
