package redisstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Each partition has bellOwners owners, whichever of the live consumers looks, and a consumer that knows
// of no other owns every partition (as when it cannot learn of the others).
func TestEachPartitionHasBellOwnersOwners(t *testing.T) {
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6", "w7"}
	owned := map[int][]string{}
	for _, self := range names {
		o := newOwners(nil, readerConfig{Consumer: self, Group: "g", Partitions: sixteenParts}, func() {})
		o.see(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == self }))
		for _, p := range sixteenParts {
			if o.owned[p.Index].Load() {
				owned[p.Index] = append(owned[p.Index], self)
			}
		}
	}
	spread := map[string]bool{}
	for _, p := range sixteenParts {
		if len(owned[p.Index]) != bellOwners {
			t.Errorf("partition %d has owners %v, want %d", p.Index, owned[p.Index], bellOwners)
		}
		for _, n := range owned[p.Index] {
			spread[n] = true
		}
	}
	if len(spread) < 5 {
		t.Errorf("16 partitions owned by %d of 7 consumers, want them spread", len(spread))
	}
	changed := 0
	alone := newOwners(nil, readerConfig{Consumer: "w1", Group: "g", Partitions: sixteenParts}, func() { changed++ })
	for _, p := range sixteenParts {
		if !alone.owned[p.Index].Load() {
			t.Fatalf("a consumer that knows of no other does not own partition %d", p.Index)
		}
	}
	if alone.see(names[1:]); changed != 1 || !alone.changed.Load() {
		t.Errorf("seeing six others told of a change %d times (flag %v), want once", changed, alone.changed.Load())
	}
}

// onePart is the streams of one Redis with one partition.
var onePart = testParts(1, false)

// idleWorkers starts n subscribers w1..wn on parts with keyspace events, each holding at most inFlight
// messages, and returns them by name with one channel of all their messages.
func idleWorkers(t *testing.T, rdb redis.UniversalClient, parts []partition, n, inFlight int) (map[string]*reader, []string, chan *message.Message) {
	t.Helper()
	createGroups(t, rdb, parts...)
	all := make(chan *message.Message, 100)
	subs := map[string]*reader{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("w%d", i+1)
		names = append(names, name)
		subs[name] = newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
			c.Consumer, c.Events, c.ClaimInterval, c.MaxInFlight = name, KeyspaceEventsAuto, time.Minute, inFlight
		})
		msgs := subscribe(t, subs[name])
		go func() {
			for m := range msgs {
				m.Metadata.Set("worker", name)
				all <- m
			}
		}()
	}
	return subs, names, all
}

// settle waits until each of names knows of the others, and only the owners of partition p are subscribed
// to its events (on rdb, the node of p's stream); it returns the owners.
func settle(t *testing.T, rdb *redis.Client, subs map[string]*reader, names []string, p partition) (owners []string) {
	t.Helper()
	channel := KeyspaceChannel(0, p.Orders)
	for deadline := time.Now().Add(2*liveEvery + idlePoll); ; time.Sleep(50 * time.Millisecond) {
		owners = owners[:0]
		saw := 0
		for _, name := range names {
			if o := subs[name].bell.owners; o.live.Load() == int64(len(names)) {
				saw++
				if o.owned[p.Index].Load() {
					owners = append(owners, name)
				}
			}
		}
		heard := rdb.PubSubNumSub(context.Background(), channel).Val()[channel]
		if saw == len(names) && len(owners) == bellOwners && heard == bellOwners {
			return owners
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %v know of the others, owners %v, %d subscribed to %s; want all, %d and %d",
				saw, names, owners, heard, channel, bellOwners, bellOwners)
		}
	}
}

// Six idle workers on one partition: only the partition's two owners hear an entry's event and read (a
// herd: six messages and six reads, five of them empty). Owners that close take themselves out of the
// live ones, and two of the other four own the partition, and hear its events, from their next look on.
func TestAnEntryWakesItsPartitionsOwnersNotEveryIdleWorker(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := onePart
	subs, names, all := idleWorkers(t, rdb, parts, 6, 128)
	owners := settle(t, rdb, subs, names, parts[0])
	add := func(i int) {
		t.Helper()
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val()
		if msg := receive(t, all); msg.UUID != id {
			t.Fatalf("received %s, want %s", msg.UUID, id)
		}
		if err := rdb.XAck(ctx, parts[0].Orders, "g", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const entries = 30
	for i := range entries {
		add(i)
	}
	n := scriptCalls(t, rdb)
	t.Logf("%d script calls for %d entries and 6 idle workers", n, entries)
	if n > entries*3 { // owners 2 an entry, a few idlePoll reads and looks; every worker would be 6
		t.Fatalf("%d script calls for %d entries, want about %d: every idle worker read every entry", n, entries, entries*2)
	}

	for _, name := range owners { // they take themselves out of the live ones as they close
		_ = subs[name].Close()
	}
	if live := rdb.ZRange(ctx, ConsumersKey(parts[0].Orders, "g"), 0, -1).Val(); len(live) != 4 {
		t.Fatalf("live consumers %v after two of six closed, want 4", live)
	}
	settle(t, rdb, subs, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(owners, n) }), parts[0])
	for i := range 3 {
		add(entries + i)
	}
}

// A worker whose read comes back full asks the idle workers for help on the backlog channel, and they
// read at once rather than at their next look (idlePoll): four workers holding one message each, four
// entries added at once, the two owners read one each and the other two the rest.
func TestABusyWorkerAsksTheIdleOnesForHelp(t *testing.T) {
	rdb := redistest.Start(t).Client()
	asksForHelp(t, rdb, rdb, onePart)
}

// On a Redis Cluster the same: the idle workers hear the backlog channel on the node of the first
// partition, and a worker's PUBLISH (keyless: go-redis sends it to any node) reaches them over the cluster
// bus.
func TestABusyWorkerAsksForHelpOnACluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithShards(3, 0))
	parts := testParts(1, true)
	opts, err := c.MasterOf(parts[0].Orders).ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	node := redis.NewClient(opts)
	t.Cleanup(func() { _ = node.Close() })
	asksForHelp(t, c.Client(), node, parts)
}

// asksForHelp runs TestABusyWorkerAsksTheIdleOnesForHelp on rdb, whose node holds parts (one partition).
func asksForHelp(t *testing.T, rdb redis.UniversalClient, node *redis.Client, parts []partition) {
	ctx := context.Background()
	subs, names, all := idleWorkers(t, rdb, parts, 4, 1)
	owners := settle(t, node, subs, names, parts[0])
	backlog := BacklogChannel(parts[0].Orders, "g")
	if heard := node.PubSubNumSub(ctx, backlog).Val()[backlog]; heard != 4 {
		t.Fatalf("%d idle workers subscribed to %s, want 4", heard, backlog)
	}
	time.Sleep(200 * time.Millisecond) // past the reads after subscribing
	pipe := node.Pipeline()
	for i := range 4 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	start, by := time.Now(), map[string]int{}
	for range 4 {
		by[receive(t, all).Metadata.Get("worker")]++
	}
	took := time.Since(start)
	t.Logf("4 entries read in %v by %v (owners %v)", took, by, owners)
	if len(by) != 4 {
		t.Fatalf("read by %v, want one entry each (each holds one)", by)
	}
	if took >= idlePoll/2 {
		t.Fatalf("the idle workers read the backlog %v after it came, want well within their next look (%v)", took, idlePoll)
	}
	var published atomic.Bool // on any node (ForEachMaster runs on each at once)
	published.Store(strings.Contains(rdb.Info(ctx, "commandstats").Val(), "cmdstat_publish:"))
	if c, ok := rdb.(*redis.ClusterClient); ok {
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if strings.Contains(m.Info(ctx, "commandstats").Val(), "cmdstat_publish:") {
				published.Store(true)
			}
			return nil
		})
	}
	if !published.Load() {
		t.Fatal("no worker published on the backlog channel")
	}
}

// On a Redis Cluster a worker subscribes to each partition it owns on that partition's node: five workers
// over three partitions on three masters, each partition heard by its two owners on its own master, and
// every partition's entries read.
func TestOwnersOnAClusterAreHeardOnEachPartitionsNode(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithShards(3, 0))
	rdb := c.Client()
	ctx := context.Background()
	parts := testParts(3, true)
	subs, names, all := idleWorkers(t, rdb, parts, 5, 128)
	nodes := map[string]bool{}
	for _, p := range parts {
		node := c.MasterOf(p.Orders)
		nodes[node.Addr] = true
		opts, err := node.ClientOptions()
		if err != nil {
			t.Fatal(err)
		}
		nodeClient := redis.NewClient(opts)
		t.Cleanup(func() { _ = nodeClient.Close() })
		t.Logf("partition %d (%s) on %s, owners %v", p.Index, p.Orders, node.Addr, settle(t, nodeClient, subs, names, p))
	}
	if len(nodes) < 2 {
		t.Fatalf("the three partitions are on %d master(s), want them spread", len(nodes))
	}
	for i, p := range parts {
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val()
		if msg := receive(t, all); msg.UUID != id {
			t.Fatalf("received %s, want %s of partition %d", msg.UUID, id, i)
		}
	}
}
