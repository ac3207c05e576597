package redisstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Idle workers with keyspace events claim a dead consumer's entries only on the partitions they own (2
// owners a partition), so that their claims cost Redis the same however many workers there are: here 4
// workers over 16 partitions, each entry claimed by an owner of its partition.
func TestIdleWorkersClaimOnlyThePartitionsTheyOwn(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	parts := sixteenParts
	createGroups(t, rdb, parts...)
	for _, p := range parts { // a consumer that read one entry of every partition and died
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", "p"}})
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const claimIdle = 8 * time.Second // longer than the workers take to learn of each other (settle)
	claimable := time.Now().Add(claimIdle)
	all := make(chan *message.Message, len(parts))
	subs := map[string]*reader{}
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("w%d", i+1)
		names = append(names, name)
		subs[name] = newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
			c.Consumer, c.Events, c.ClaimIdle, c.ClaimInterval = name, KeyspaceEventsAuto, claimIdle, 50*time.Millisecond
		})
		msgs := subscribe(t, subs[name])
		go func() {
			for m := range msgs {
				m.Metadata.Set("worker", name)
				all <- m
			}
		}()
	}
	settle(t, rdb, subs, names, parts[0])
	if time.Now().After(claimable) {
		t.Fatalf("the workers learnt of each other after the entries became claimable: raise claimIdle")
	}
	for _, p := range parts { // Owns, which the worker's housekeeping asks of partition 0, says the same
		owners := 0
		for _, name := range names {
			if subs[name].Owns(p.Index) {
				owners++
			}
		}
		if owners != bellOwners {
			t.Errorf("partition %d: %d subscribers say they own it, want %d", p.Index, owners, bellOwners)
		}
	}
	for range parts {
		select {
		case m := <-all:
			worker, p := m.Metadata.Get("worker"), EntryPartition(m)
			if !subs[worker].bell.owns(p) {
				t.Errorf("%s claimed the entry of partition %d, which it does not own", worker, p)
			}
		case <-time.After(claimIdle + 5*time.Second):
			t.Fatal("not every entry was claimed")
		}
	}
}
