package stream

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
)

// A subscriber reads every partition in turn, starting at its own, gives each message its entry id, its
// partition and its delivery count, and poisons an oversized entry into its own partition's poison stream.
func TestSubscriberReadsEveryPartitionInTurn(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	ids := map[string]int{} // stream/entry id: partition
	for _, p := range threeParts {
		for range 2 {
			// Entries of different partitions may share an id: the partition tells them apart.
			ids[p.Orders+"/"+rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}}).Val()] = p.Index
		}
	}
	big := rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[2].Orders, Values: []string{"payload", strings.Repeat("x", MaxEntryBytes)}}).Val()
	s := newTestSubscriber(t, rdb, threeParts, func(c *SubscriberConfig) { c.First = 1 })

	var order []int
	for range 6 {
		msgs, err := s.read(ctx)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("read %v (%v), want one message", msgs, err)
		}
		msg := msgs[0]
		p := EntryPartition(msg)
		if want, ok := ids[threeParts[p].Orders+"/"+msg.UUID]; !ok || want != p || string(msg.Payload) != threeParts[p].Orders || Deliveries(msg) != 1 {
			t.Fatalf("read %s tagged partition %d, payload %s, %d deliveries", msg.UUID, p, msg.Payload, Deliveries(msg))
		}
		order = append(order, p)
	}
	// Consumer 1 starts at partition 1 and moves on after each entry it reads.
	if want := []int{1, 2, 0, 1, 2, 0}; !slices.Equal(order, want) {
		t.Errorf("partitions read in the order %v, want %v (round robin from the consumer's own)", order, want)
	}
	if msgs, err := s.read(ctx); err != nil || len(msgs) != 0 {
		t.Fatalf("read of empty partitions: %v (%v), want nothing and no error", msgs, err)
	}
	if n := rdb.XLen(ctx, threeParts[2].Poison).Val(); n != 1 || rdb.XLen(ctx, threeParts[0].Poison).Val() != 0 {
		t.Errorf("oversized entry %s of partition 2: %d in its poison stream, want 1 there and none elsewhere", big, n)
	}
}

// A partition whose reads fail (here a key of the wrong type; in production a cluster node that is down)
// does not keep the subscriber from the others: their entries are read, an empty pass is no error, and
// the failure shows in SubscriberConfig.Failing. Only when every partition fails does the read fail.
func TestSubscriberSkipsAFailingPartition(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts[0], threeParts[2])
	for _, p := range []Partition{threeParts[0], threeParts[2]} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}})
	}
	rdb.Set(ctx, threeParts[1].Orders, "not a stream", 0)
	s := newTestSubscriber(t, rdb, threeParts, func(c *SubscriberConfig) { c.First = 1 }) // the failing one first
	var read []string
	for range 3 {
		msgs, err := s.read(ctx)
		if err != nil {
			t.Fatalf("read failed while two partitions work: %v", err)
		}
		for _, m := range msgs {
			read = append(read, string(m.Payload))
		}
	}
	slices.Sort(read)
	if !slices.Equal(read, []string{threeParts[0].Orders, threeParts[2].Orders}) {
		t.Errorf("read %v, want the entries of the two working partitions", read)
	}
	if s.cfg.Failing.Load() == 0 {
		t.Error("a partition fails, but the reads are not marked failing")
	}

	for _, p := range []Partition{threeParts[0], threeParts[2]} {
		rdb.Del(ctx, p.Orders)
		rdb.Set(ctx, p.Orders, "not a stream either", 0)
	}
	all := newTestSubscriber(t, rdb, threeParts)
	if _, err := all.read(ctx); err == nil {
		t.Error("every partition failing: no error, want theirs")
	}
}
