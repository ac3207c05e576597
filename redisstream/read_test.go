package redisstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A read takes its count split over the partitions, in one pipeline, gives each message its entry id, its
// partition and its delivery count, and poisons an oversized entry into its own partition's poison stream.
// A read of fewer entries than partitions takes one from each of the next ones, in turn.
func TestSubscriberReadsThePartitionsTogether(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	ids := map[string]int{} // stream/entry id: partition
	for _, p := range threeParts {
		for range 3 {
			// Entries of different partitions may share an id: the partition tells them apart.
			ids[p.Orders+"/"+rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}}).Val()] = p.Index
		}
	}
	big := rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[2].Orders, Values: []string{"payload", strings.Repeat("x", DefaultMaxEntryBytes)}}).Val()
	s := newTestSubscriber(t, rdb, threeParts)
	s.next = 1

	perPartition := map[int]int{}
	for _, msg := range s.read(ctx, 6) {
		p := EntryPartition(msg)
		if want, ok := ids[threeParts[p].Orders+"/"+msg.UUID]; !ok || want != p || string(msg.Payload) != threeParts[p].Orders || Deliveries(msg) != 1 {
			t.Fatalf("read %s tagged partition %d, payload %s, %d deliveries", msg.UUID, p, msg.Payload, Deliveries(msg))
		}
		perPartition[p]++
	}
	if perPartition[0] != 2 || perPartition[1] != 2 || perPartition[2] != 2 {
		t.Fatalf("a read of 6 took %v by partition, want 2 of each", perPartition)
	}
	var order []int
	for range 3 {
		msgs := s.read(ctx, 1)
		if len(msgs) != 1 {
			t.Fatalf("read of 1: %d messages", len(msgs))
		}
		order = append(order, EntryPartition(msgs[0]))
	}
	if want := []int{1, 2, 0}; !slices.Equal(order, want) {
		t.Errorf("reads of one took the partitions %v, want %v (in turn, from where the last read began)", order, want)
	}
	if msgs := s.read(ctx, 10); len(msgs) != 0 {
		t.Errorf("read %d more messages, want none: the one left is oversized", len(msgs))
	}
	if n := rdb.XLen(ctx, threeParts[2].Poison).Val(); n != 1 || rdb.XLen(ctx, threeParts[0].Poison).Val() != 0 {
		t.Errorf("oversized entry %s of partition 2: %d in its poison stream, want 1 there and none elsewhere", big, n)
	}
}

// A partition whose reads fail (here a key of the wrong type; in production a cluster node that is down)
// does not keep the subscriber from the others: their entries are read, and the failure shows in
// readerConfig.Failing.
func TestSubscriberSkipsAFailingPartition(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts[0], threeParts[2])
	for _, p := range []partition{threeParts[0], threeParts[2]} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}})
	}
	rdb.Set(ctx, threeParts[1].Orders, "not a stream", 0)
	s := newTestSubscriber(t, rdb, threeParts)
	var read []string
	for _, m := range s.read(ctx, 10) {
		read = append(read, string(m.Payload))
	}
	slices.Sort(read)
	if !slices.Equal(read, []string{threeParts[0].Orders, threeParts[2].Orders}) {
		t.Errorf("read %v, want the entries of the two working partitions", read)
	}
	if s.cfg.Failing.Load() == 0 || !s.skipped(threeParts[1]) {
		t.Error("a partition fails, but the reads are not marked failing, or it is not skipped")
	}
	if parts := s.readable(); len(parts) != 2 {
		t.Errorf("readable partitions %v, want the two that work", parts)
	}
}

// A read that meets an oversized entry among others poisons it and hands over the others, in order.
func TestAReadPoisonsTheOversizedEntryAmongOthers(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	p := threeParts[0]
	createGroups(t, rdb, p)
	var want []string
	for i, payload := range []string{"first", strings.Repeat("x", DefaultMaxEntryBytes), "third"} {
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", payload}}).Val()
		if i != 1 {
			want = append(want, id)
		}
	}
	s := newTestSubscriber(t, rdb, []partition{p})
	var got []string
	for _, msg := range s.read(ctx, 10) {
		if Deliveries(msg) != 1 || msg.Metadata.Get(UnmarshalError) != "" {
			t.Fatalf("read %s: %d deliveries, bad entry %q", msg.UUID, Deliveries(msg), msg.Metadata.Get(UnmarshalError))
		}
		got = append(got, msg.UUID)
	}
	if !slices.Equal(got, want) || rdb.XLen(ctx, p.Poison).Val() != 1 {
		t.Fatalf("read %v with %d poisoned, want %v and the oversized entry poisoned", got, rdb.XLen(ctx, p.Poison).Val(), want)
	}
}

// A server without cmsgpack (miniredis, which the embedded demo runs) hands the entries over as an array:
// they read the same, a read's and a claim's with its delivery count.
func TestAServerWithoutCmsgpackHandsTheEntriesOverAsAnArray(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	p := threeParts[0]
	createGroups(t, rdb, p)
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", "first"}}).Val()
	s := newTestSubscriber(t, rdb, []partition{p})
	for _, mode := range []string{"read", "claim"} {
		msgs, _, err := fetchNow(ctx, s, p, mode) // a claim: of the entry just read
		if err != nil || len(msgs) != 1 || msgs[0].UUID != id || string(msgs[0].Payload) != "first" ||
			Deliveries(msgs[0]) != map[string]int64{"read": 1, "claim": 2}[mode] {
			t.Fatalf("%s on miniredis: %v, %v", mode, msgs, err)
		}
	}
}

// An oversized entry that a read or a claim poisons is acked as well as deleted: left pending, a deleted
// entry would be claimed every claim round, and reported as an order lost (stockflow.messages.deleted).
func TestAPoisonedOversizedEntryIsAckedNotLeftPending(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	p := threeParts[0]
	createGroups(t, rdb, p)
	big := []string{"payload", strings.Repeat("x", DefaultMaxEntryBytes)}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: big})
	s := newTestSubscriber(t, rdb, []partition{p})
	pending := func() []redis.XPendingExt {
		return rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.Orders, Group: "g", Start: "-", End: "+", Count: 10}).Val()
	}
	if msgs := s.read(ctx, 10); len(msgs) != 0 || len(pending()) != 0 {
		t.Fatalf("a read of an oversized entry: %d messages, pending %+v; want none", len(msgs), pending())
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: big})
	// A consumer that died holding it, claimed at once (idle for 0 ms).
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if msgs, _, err := fetchNow(ctx, s, p, "claim"); err != nil || len(msgs) != 0 {
		t.Fatalf("a claim of an oversized entry: %d messages, %v; want none", len(msgs), err)
	}
	if n := rdb.XLen(ctx, p.Poison).Val(); n != 2 || len(pending()) != 0 {
		t.Fatalf("%d entries poisoned, pending %+v; want both poisoned and neither pending", n, pending())
	}
}

// A subscriber reading a backlog with one place in flight (one partition a read) reads on over the
// partitions until it has found every one of them empty since it last found entries, and only then waits
// for a keyspace event (subscribes): the backlog's partition comes round again every 16 reads, and no
// event announces its entries again. (Idling at the first empty partition subscribed and unsubscribed for
// every entry of the backlog; polling, it paused up to 100 ms between two partitions.)
func TestASubscriberIdlesOnlyOnceEveryPartitionWasFoundEmpty(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := sixteenParts
	createGroups(t, rdb, parts...)
	backlog := parts[9]
	const n = 20
	for i := range n {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: backlog.Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.MaxInFlight, c.Events, c.ClaimInterval = 1, KeyspaceEventsAuto, time.Minute // one claim round, at the start
	}))
	for i := range n {
		msg := receive(t, msgs)
		if i == n-1 { // the read loop waits for this one's place: the backlog was never left for an event
			if calls := commandCalls(t, rdb, "subscribe"); calls != 0 {
				t.Fatalf("%d subscriptions to keyspace events while a backlog of %d entries was read: "+
					"the subscriber idled before it had read every partition", calls, n)
			}
		}
		if err := rdb.XAck(ctx, backlog.Orders, "g", msg.UUID).Err(); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
	awaitSubscribed(t, rdb, KeyspaceChannel(0, backlog.Orders)) // idle once it is drained
}

// fetchNow makes one fetch.lua call in mode of partition p on its own, for up to 10 entries; a claim takes
// the entries idle for any time.
func fetchNow(ctx context.Context, s *reader, p partition, mode string) ([]*message.Message, claimReply, error) {
	c := s.call(mode, p, 10)
	args := c.args(s)
	args[6] = 0 // the minimum idle time
	c.cmd = fetchScript.Run(ctx, s.rdb, c.keys(s), args...)
	return s.reply(ctx, &c)
}
