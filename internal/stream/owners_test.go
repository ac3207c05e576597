package stream

import (
	"context"
	"fmt"
	"reflect"
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
// now and then a third), not by all six (a herd: six reads, five of them empty); and when the owners are
// gone the others still read the partition's entries.
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
	time.Sleep(idlePoll + 500*time.Millisecond) // every consumer read once, and each saw the others
	for _, name := range names {
		o := subs[name].bell.owners
		if got, want := o.every.Load(), uint32(2*(6-bellOwners)); got != want {
			t.Fatalf("%s answers one in %d of the others' events, want %d: it did not see the other five", name, got, want)
		}
	}
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

	var owners []string
	for _, name := range names {
		if subs[name].bell.owners.owned[0].Load() {
			owners = append(owners, name)
			_ = subs[name].Close()
		}
	}
	if len(owners) != bellOwners {
		t.Fatalf("owners %v, want %d", owners, bellOwners)
	}
	key := ConsumersKey(parts[0].Orders, "g")
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		live := rdb.ZRange(ctx, key, 0, -1).Val()
		if !slices.Contains(live, owners[0]) && !slices.Contains(live, owners[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %v, want the closed owners %v taken out", key, live, owners)
		}
	}
	for i := range 3 { // read by the others: one in every few events, or their next idlePoll read
		add(entries + i)
	}
	if reflect.DeepEqual(owners, names[:bellOwners]) {
		t.Log("the owners were the first two") // (not a failure: which ones own the partition is the hash's)
	}
}
