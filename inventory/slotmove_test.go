package inventory_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// slotMove is a slot being moved by hand, as redis-cli --cluster reshard does it: the target imports
// it, the source migrates it, and until finish moves its keys and hands it over, a script whose keys
// are split between the two (a stocked SKU's new order) gets TRYAGAIN.
type slotMove struct {
	t        *testing.T
	slot     int64
	src, dst *redis.Client
	dstID    string
	dstAddr  string
	masters  []*redis.Client
}

// startSlotMove starts moving the slot of key from its master to another master of c, a cluster
// without replicas.
func startSlotMove(t *testing.T, c *redistest.Cluster, key string) *slotMove {
	t.Helper()
	ctx := context.Background()
	src := c.MasterOf(key)
	m := &slotMove{t: t, src: adminOf(t, src)}
	for _, n := range c.Nodes {
		cl := adminOf(t, n)
		m.masters = append(m.masters, cl)
		if m.dst == nil && n.Addr != src.Addr {
			m.dst, m.dstAddr = cl, n.Addr
		}
	}
	m.slot = m.src.ClusterKeySlot(ctx, key).Val()
	srcID, err := m.src.Do(ctx, "cluster", "myid").Text()
	fatalIf(t, err)
	m.dstID, err = m.dst.Do(ctx, "cluster", "myid").Text()
	fatalIf(t, err)
	fatalIf(t, m.dst.Do(ctx, "cluster", "setslot", m.slot, "importing", srcID).Err())
	fatalIf(t, m.src.Do(ctx, "cluster", "setslot", m.slot, "migrating", m.dstID).Err())
	return m
}

// finish moves the slot's keys to the target and hands the slot over, the target first, as redis-cli
// does.
func (m *slotMove) finish() {
	ctx := context.Background()
	keys, err := m.src.ClusterGetKeysInSlot(ctx, int(m.slot), 1000).Result()
	fatalIf(m.t, err)
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(m.dstAddr)
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		fatalIf(m.t, m.src.Do(ctx, args...).Err())
	}
	fatalIf(m.t, m.dst.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err())
	for _, cl := range m.masters {
		fatalIf(m.t, cl.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err())
	}
}

func adminOf(t *testing.T, s *redisproc.Server) *redis.Client {
	t.Helper()
	opts, err := s.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(opts)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func fatalIf(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tryAgainHook counts the TRYAGAIN replies the cluster client hands back, after its own retries, and runs
// then at the first.
type tryAgainHook struct {
	mu   sync.Mutex
	seen int
	then func()
}

func (h *tryAgainHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tryAgainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.saw(err)
		return err
	}
}

func (h *tryAgainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.saw(cmd.Err())
		}
		return err
	}
}

func (h *tryAgainHook) saw(err error) {
	if !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen++
	if h.then != nil {
		h.then()
		h.then = nil
	}
}

func (h *tryAgainHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

// clusterStore starts a cluster of three masters and a store on it with sku stocked with 10.
func clusterStore(t *testing.T, sku string) (*redistest.Cluster, *redis.ClusterClient, *inventory.Store) {
	t.Helper()
	c := redistest.StartCluster(t, redistest.WithShards(3, 0))
	cl := c.Client()
	store := inventory.New(cl)
	if err := store.SetStock(context.Background(), sku, 10); err != nil {
		t.Fatal(err)
	}
	return c, cl, store
}

func TestAReserveThatMeetsTryAgainGoesThroughOnceTheSlotHasMoved(t *testing.T) {
	ctx := context.Background()
	c, cl, store := clusterStore(t, "SKU-1")
	move := startSlotMove(t, c, stock.Key("SKU-1"))
	hook := &tryAgainHook{then: move.finish}
	cl.AddHook(hook)

	out, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 0)
	if err != nil || out.Status != order.StatusReserved || out.AvailableAfter != 7 {
		t.Fatalf("Reserve = %+v, %v; want reserved with 7 left", out, err)
	}
	if hook.count() != 1 {
		t.Fatalf("the client handed back %d TRYAGAIN replies, want 1 (the slot was not moving?)", hook.count())
	}
	if got := c.MasterOf(stock.Key("SKU-1")).Addr; got != move.dstAddr {
		t.Fatalf("the stock is on %s, want %s: the slot did not move", got, move.dstAddr)
	}
}

func TestAReserveWhoseSlotKeepsMovingFailsTransientlyAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	c, cl, store := clusterStore(t, "SKU-1")
	move := startSlotMove(t, c, stock.Key("SKU-1"))
	hook := &tryAgainHook{}
	cl.AddHook(hook)

	_, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 0)
	if !errors.Is(err, inventory.ErrSlotMoving) || inventory.IsPermanent(err) {
		t.Fatalf("Reserve during a move = %v, want a transient ErrSlotMoving", err)
	}
	if hook.count() != inventory.SlotMoveAttempts {
		t.Fatalf("the script was sent %d times, want %d", hook.count(), inventory.SlotMoveAttempts)
	}
	move.finish()
	out, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 0)
	if err != nil || out.AvailableAfter != 7 {
		t.Fatalf("Reserve after the move = %+v, %v; want reserved with 7 left (the failed call wrote nothing)", out, err)
	}
}

func TestAPipelinedBatchThatMeetsTryAgainIsRetriedAlone(t *testing.T) {
	ctx := context.Background()
	c, cl, store := clusterStore(t, "SKU-1")
	if err := store.SetStock(ctx, "SKU-2", 10); err != nil {
		t.Fatal(err)
	}
	if cl.ClusterKeySlot(ctx, stock.Key("SKU-2")).Val() == cl.ClusterKeySlot(ctx, stock.Key("SKU-1")).Val() {
		t.Fatal("SKU-1 and SKU-2 share a slot: pick others")
	}
	move := startSlotMove(t, c, stock.Key("SKU-1"))
	hook := &tryAgainHook{then: move.finish}
	cl.AddHook(hook)

	results := store.ReserveBatches(ctx, []inventory.Batch{
		{Ctx: ctx, Orders: []inventory.Order{{ID: "o-1", SKU: "SKU-1", Quantity: 3}}},
		{Ctx: ctx, Orders: []inventory.Order{{ID: "o-2", SKU: "SKU-2", Quantity: 4}}},
	})
	for i, want := range []int64{7, 6} {
		if r := results[i]; r.Err != nil || r.Outcomes[0].AvailableAfter != want {
			t.Fatalf("batch %d = %+v, %v; want %d left", i, r.Outcomes, r.Err, want)
		}
	}
	if hook.count() != 1 {
		t.Fatalf("the pipeline handed back %d TRYAGAIN replies, want 1 (the slot was not moving?)", hook.count())
	}
}
