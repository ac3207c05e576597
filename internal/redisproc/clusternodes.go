package redisproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNode is one line of CLUSTER NODES:
//
//	<id> <ip:port@bus[,hostname]> <flags> <master id|-> <ping> <pong> <epoch> <link> <slot ranges...>
type clusterNode struct {
	id, addr, masterID string
	flags              []string
	slots              [][2]int // inclusive ranges
}

func parseClusterNodes(text string) []clusterNode {
	var nodes []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, masterID: f[3], flags: strings.Split(f[2], ",")}
		for _, r := range f[8:] {
			if lo, hi, ok := parseSlotRange(r); ok {
				n.slots = append(n.slots, [2]int{lo, hi})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// parseSlotRange reads "5461" or "0-5460"; not a slot being imported or migrated ("[93->-id]").
func parseSlotRange(r string) (lo, hi int, ok bool) {
	from, to, isRange := strings.Cut(r, "-")
	lo, err := strconv.Atoi(from)
	if err != nil {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, err = strconv.Atoi(to)
	return lo, hi, err == nil
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

// failing: some node counts it as failing (fail?), or the cluster agreed it failed (fail).
func (n clusterNode) failing() bool { return n.has("fail") || n.has("fail?") }

func (n clusterNode) serves(slot int) bool {
	return slices.ContainsFunc(n.slots, func(r [2]int) bool { return r[0] <= slot && slot <= r[1] })
}

func (n clusterNode) slotCount() int {
	count := 0
	for _, r := range n.slots {
		count += r[1] - r[0] + 1
	}
	return count
}

// view is CLUSTER NODES as s sees the cluster.
func (c *Cluster) view(ctx context.Context, s *Server) ([]clusterNode, error) {
	cl := adminClient(s)
	defer cl.Close()
	text, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster nodes on %s: %w", s.Addr, err)
	}
	return parseClusterNodes(text), nil
}

// running are the nodes whose process runs.
func (c *Cluster) running() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if s.Pid() != 0 {
			out = append(out, s)
		}
	}
	return out
}

func (c *Cluster) node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// adminClient is a client of one node for the checks: it fails fast instead of retrying.
func adminClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, ContextTimeoutEnabled: true, DisableIdentity: true})
}
