package harness

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/internal/stream"
)

// scalePartitions is the number of stream partitions of the partitioned sites.
const scalePartitions = 16

func scaleTable(wl e2eWorkload) *Table {
	return &Table{
		ID:    "scale",
		Title: "6. scale out: end to end on 1 master and on a 3-master Redis Cluster, 2 worker processes, lock on",
		Setup: fmt.Sprintf("%d orders of 1 unit over 200 SKUs, uniform, %d units per SKU; every server on this one machine, so the "+
			"cluster shows the cost and the spread, not more capacity; a cluster's masters have no replicas here", wl.orders, wl.seed()),
		Columns: []Column{{Key: "orders_per_s", Header: "orders/s"}, {Key: "latency_p99_ms", Header: "p99 latency ms", Digits: 1},
			{Key: "redis_cpu_us", Header: "Redis CPU µs/order (all servers)", Digits: 0},
			{Key: "busiest_node_cpu_us", Header: "busiest server's CPU µs/order", Digits: 0},
			{Key: "busiest_node_orders", Header: "busiest server's share of the orders", Digits: 2},
			{Key: "worker_cpu_us", Header: "workers CPU µs/order", Digits: 0}},
		RatioOf: "orders_per_s", RatioBase: "1 master, 1 partition",
	}
}

// scale is comparison 6: the end-to-end pipeline on the main server with one partition and with 16, and
// on a 3-master cluster (started for it) with 16.
func (b *bench) scale(ctx context.Context) error {
	if b.cfg.WorkerBin == "" {
		b.progress("scale skipped: no worker binary (scripts/bench.sh builds it)")
		return nil
	}
	cl, err := redisproc.StartCluster(redisproc.ClusterOptions{Masters: 3})
	if err != nil {
		return err
	}
	defer cl.Stop()
	for _, n := range cl.Nodes {
		b.cfg.notePid(n.Pid(), n.Addr+" "+redisproc.ProcessMarker)
	}
	opts, err := redis.ParseClusterURL(cl.URL())
	if err != nil {
		return err
	}
	client := redis.NewClusterClient(opts)
	defer client.Close()
	sites := []struct {
		name string
		site
	}{
		{"1 master, 1 partition", b.single(1)},
		{"1 master, 16 partitions", b.single(scalePartitions)},
		{"3-master cluster, 16 partitions", site{url: cl.URL(), cluster: true, partitions: scalePartitions, masters: cl.Addrs(),
			flush: func(ctx context.Context) error {
				return client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() })
			}}},
	}
	wl := e2eWorkload{"scale", "200 SKUs uniform", "uniform", b.cfg.E2EOrders, 0}
	t := b.addTable(scaleTable(wl))
	return interleave(b.cfg.Rounds, len(sites), func(round, i int) error {
		s := sites[i]
		res, err := b.e2eRun(ctx, s.site, e2eModes[0], wl)
		if err != nil {
			return fmt.Errorf("scale %s: %w", s.name, err)
		}
		v := res.values(wl.orders)
		v["busiest_node_cpu_us"] = float64(slices.Max(res.nodesCPU).Microseconds()) / float64(wl.orders)
		if v["busiest_node_orders"], err = b.busiestShare(ctx, s.site, cl); err != nil {
			return err
		}
		b.progress("scale round %d/%d %-32s %7.0f orders/s  Redis CPU %4.0f µs/order (busiest server %4.0f)  busiest server's orders %.2f",
			round+1, b.cfg.Rounds, s.name, v["orders_per_s"], v["redis_cpu_us"], v["busiest_node_cpu_us"], v["busiest_node_orders"])
		t.add(s.name, v)
		b.checkE2E("scale "+s.name, round, res)
		return nil
	})
}

// busiestShare is the share of the orders in the partitions of the site's busiest server: 1 on one server,
// about 1/3 on 3 masters when the partitions spread evenly.
func (b *bench) busiestShare(ctx context.Context, s site, cl *redisproc.Cluster) (float64, error) {
	if !s.cluster {
		return 1, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	layout := stream.Config{OrdersStream: "orders", ResultsStream: "order-results", PoisonStream: "orders-poison",
		Cluster: true, OrdersPartitions: s.partitions}
	byNode := map[string]int64{}
	var total int64
	for _, p := range layout.Partitions() {
		node, err := cl.MasterFor(ctx, p.Orders)
		if err != nil {
			return 0, err
		}
		n, err := b.infoClient(node.Addr).XLen(ctx, p.Orders).Result()
		if err != nil {
			return 0, err
		}
		byNode[node.Addr] += n
		total += n
	}
	var most int64
	for _, n := range byNode {
		most = max(most, n)
	}
	return float64(most) / float64(max(total, 1)), nil
}
