package stream

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
)

// Each partition has bellOwners owners, whichever of the live consumers looks, and a consumer that knows
// of no other owns every partition and answers every event (as when it cannot learn of the others).
func TestEachPartitionHasBellOwnersOwners(t *testing.T) {
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6", "w7"}
	owned := map[int][]string{}
	for _, self := range names {
		o := newOwners(self, sixteenParts)
		o.see(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == self }))
		for _, p := range sixteenParts {
			if o.owned[p.Index].Load() {
				owned[p.Index] = append(owned[p.Index], self)
			}
		}
		if every := o.every.Load(); every != 2*(7-bellOwners) {
			t.Errorf("%s answers one in %d of the others' events, want %d", self, every, 2*(7-bellOwners))
		}
	}
	o := newOwners("w1", sixteenParts)
	o.see(names[1:])
	for _, p := range sixteenParts {
		if o.owned[p.Index].Load() {
			continue
		}
		answered := 0
		for range 3 * o.every.Load() {
			if o.answers(p.Index) {
				answered++
			}
		}
		if answered != 3 {
			t.Errorf("a non-owner answered %d of %d events of partition %d, want 3", answered, 3*o.every.Load(), p.Index)
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
	alone := newOwners("w1", sixteenParts)
	for _, p := range sixteenParts {
		if !alone.answers(p.Index) {
			t.Fatalf("a consumer that knows of no other does not answer partition %d", p.Index)
		}
	}
}

// Six idle workers on one partition: an entry is read by about two of them, its partition's owners (and
// now and then a third), not by all six (a herd: six reads, five of them empty). Owners that close take
// themselves out of the live ones, and two of the other four own the partition from their next look on.
func TestAnEntryWakesItsPartitionsOwnersNotEveryIdleWorker(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := Config{OrdersStream: "orders", ResultsStream: "results", PoisonStream: "poison", OrdersPartitions: 1}.Partitions()
	createGroups(t, rdb, parts...)
	all := make(chan *message.Message)
	subs := map[string]*Subscriber{}
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("w%d", i+1)
		names = append(names, name)
		subs[name] = newTestSubscriber(t, rdb, parts, func(c *SubscriberConfig) {
			c.Consumer, c.Events, c.ClaimInterval = name, EventsAuto, time.Minute // no claim round in the count
		})
		msgs := subscribe(t, subs[name])
		go func() {
			for m := range msgs {
				all <- m
			}
		}()
	}
	// ownersOf waits until each of names sees the others (answers one in every 2 x (n - bellOwners) of the
	// others' events), and returns those that own the partition.
	ownersOf := func(names []string) (owners []string) {
		t.Helper()
		for deadline := time.Now().Add(3 * idlePoll); ; time.Sleep(50 * time.Millisecond) {
			saw := 0
			for _, name := range names {
				if subs[name].bell.owners.every.Load() == uint32(2*(len(names)-bellOwners)) {
					saw++
				}
			}
			if saw == len(names) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %v see the others within %v", saw, names, 3*idlePoll)
			}
		}
		for _, name := range names {
			if subs[name].bell.owners.owned[0].Load() {
				owners = append(owners, name)
			}
		}
		if len(owners) != bellOwners {
			t.Fatalf("%v own the partition, want %d of %v", owners, bellOwners, names)
		}
		return owners
	}
	owners := ownersOf(names)
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
	if n > entries*4 { // owners 2 an entry, the others 1/2, a few idlePoll reads; every worker would be 6
		t.Fatalf("%d script calls for %d entries, want about %d: every idle worker read every entry", n, entries, entries*5/2)
	}

	for _, name := range owners { // they take themselves out of the live ones as they close
		_ = subs[name].Close()
	}
	if live := rdb.ZRange(ctx, ConsumersKey(parts[0].Orders, "g"), 0, -1).Val(); len(live) != 4 {
		t.Fatalf("live consumers %v after two of six closed, want 4", live)
	}
	ownersOf(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(owners, n) }))
	for i := range 3 {
		add(entries + i)
	}
}
