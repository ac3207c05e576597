package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redistest"
)

var threeParts = Config{OrdersStream: "orders", ResultsStream: "results", PoisonStream: "poison", OrdersPartitions: 3}.Partitions()

// newTestSubscriber is consumer c1 of group g on parts, claiming entries idle for 30 s, changed by change.
func newTestSubscriber(t *testing.T, rdb redis.UniversalClient, parts []Partition, change ...func(*SubscriberConfig)) *Subscriber {
	t.Helper()
	cfg := SubscriberConfig{Partitions: parts, Group: "g", Consumer: "c1", PoisonMaxLen: 100, ClaimIdle: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Failing: new(atomic.Int64),
		ReplayFrom: func(time.Time) string { return "0" }}
	for _, c := range change {
		c(&cfg)
	}
	s, err := NewSubscriber(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func subscribe(t *testing.T, s *Subscriber) <-chan *message.Message {
	t.Helper()
	msgs, err := s.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// receive returns the next message of msgs, failing the test after 5 s.
func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-msgs:
		if !ok {
			t.Fatal("the subscription ended")
		}
		return msg
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5 s")
		return nil
	}
}

// done acks msg's entry in Redis, as the worker does with its outcome, then acks the message.
func done(t *testing.T, rdb redis.UniversalClient, msg *message.Message) {
	t.Helper()
	if err := rdb.XAck(context.Background(), threeParts[EntryPartition(msg)].Orders, "g", msg.UUID).Err(); err != nil {
		t.Fatal(err)
	}
	msg.Ack()
}

func createGroups(t *testing.T, rdb redis.UniversalClient, parts ...Partition) {
	t.Helper()
	for _, p := range parts {
		if err := rdb.XGroupCreateMkStream(context.Background(), p.Orders, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

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

// The entries a dead consumer left pending are claimed once idle for ClaimIdle, on every partition, one at
// a time: the next is claimed only once the one before was handled. Their delivery count counts the claim.
func TestSubscriberClaimsIdleEntriesOneAtATime(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	for _, p := range threeParts {
		for range 2 {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}})
		}
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *SubscriberConfig) {
		c.Consumer, c.ClaimIdle, c.ClaimInterval = "c2", 200*time.Millisecond, 10*time.Millisecond
	}))
	claimed := map[string]bool{}
	for len(claimed) < 6 {
		msg := receive(t, msgs)
		p := threeParts[EntryPartition(msg)]
		if Deliveries(msg) != 2 || string(msg.Payload) != p.Orders {
			t.Fatalf("claimed %s of %s with %d deliveries, payload %s; want 2 deliveries", msg.UUID, p.Orders, Deliveries(msg), msg.Payload)
		}
		if n := pendingFor(t, rdb, "c2"); n != 1 {
			t.Fatalf("%d entries pending for c2 while it handles one, want 1 (claimed one at a time)", n)
		}
		claimed[p.Orders+"/"+msg.UUID] = true
		done(t, rdb, msg)
	}
	if n := pendingFor(t, rdb, "dead"); n != 0 {
		t.Errorf("%d entries still pending for the dead consumer, want all claimed", n)
	}
}

// pendingFor counts the entries pending for consumer over the partitions.
func pendingFor(t *testing.T, rdb redis.UniversalClient, consumer string) int {
	t.Helper()
	n := 0
	for _, p := range threeParts {
		pending, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: p.Orders, Group: "g",
			Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += len(pending)
	}
	return n
}

// A nacked message is not sent again: its entry stays pending, the next entry comes, and the nacked one
// comes back through a claim once idle for ClaimIdle.
func TestSubscriberLeavesANackedEntryPending(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	first := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", "1"}}).Val()
	second := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", "2"}}).Val()
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *SubscriberConfig) {
		c.ClaimIdle, c.ClaimInterval, c.NackPause = time.Second, 10*time.Millisecond, time.Millisecond
	}))
	msg := receive(t, msgs)
	if msg.UUID != first {
		t.Fatalf("first message %s, want %s", msg.UUID, first)
	}
	msg.Nack()
	select {
	case <-msg.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the nacked message's context is not done")
	}
	if msg = receive(t, msgs); msg.UUID != second {
		t.Fatalf("after a nack: %s, want the next entry %s (no resend)", msg.UUID, second)
	}
	if p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: parts[0].Orders, Group: "g", Start: first, End: first,
		Count: 1}).Val(); len(p) != 1 || p[0].Consumer != "c1" || p[0].RetryCount != 1 {
		t.Fatalf("nacked entry: %+v, want it pending for c1, delivered once", p)
	}
	done(t, rdb, msg)
	if msg = receive(t, msgs); msg.UUID != first || Deliveries(msg) != 2 {
		t.Fatalf("then %s with %d deliveries, want the nacked %s claimed again (2 deliveries)", msg.UUID, Deliveries(msg), first)
	}
}

// The consumers of the group that have been idle longer than ConsumerTimeout with nothing pending are
// deleted, on every partition; one with pending entries stays, however idle.
func TestSubscriberPrunesIdleConsumers(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	for _, p := range threeParts {
		rdb.XGroupCreateConsumer(ctx, p.Orders, "g", "gone")
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", "p"}})
		rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "busy", Streams: []string{p.Orders, ">"}})
	}
	subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *SubscriberConfig) {
		c.PruneInterval, c.ConsumerTimeout = 20*time.Millisecond, time.Second
	}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, p := range threeParts {
			for _, c := range rdb.XInfoConsumers(ctx, p.Orders, "g").Val() {
				if c.Name != "c1" { // the subscriber itself: Redis before 7.2 lists it only once it read an entry
					left = append(left, fmt.Sprintf("%d/%s", p.Index, c.Name))
				}
			}
		}
		slices.Sort(left)
		if want := []string{"0/busy", "1/busy", "2/busy"}; slices.Equal(left, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers %v after 10 s, want every idle one without pending entries (gone) deleted", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under a Router, a subscriber sends its entries in order, one at a time; the Router's acks do not ack
// the entries in Redis (the worker does, with their outcomes); closing the Router ends the subscription
// without closing the Redis client.
func TestSubscriberFeedsARouter(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	var want []string
	for i := range 3 {
		want = append(want, rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val())
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 10)
	var inFlight, most atomic.Int32
	router.AddConsumerHandler("c1", "orders", newTestSubscriber(t, rdb, parts), func(msg *message.Message) error {
		most.Store(max(most.Load(), inFlight.Add(1)))
		defer inFlight.Add(-1)
		time.Sleep(10 * time.Millisecond)
		handled <- msg.UUID
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	var got []string
	for range 3 {
		select {
		case id := <-handled:
			got = append(got, id)
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %v within 5 s, want %v", got, want)
		}
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("router run: %v", err)
	}
	if !slices.Equal(got, want) || most.Load() != 1 {
		t.Errorf("handled %v, at most %d at once; want %v one at a time", got, most.Load(), want)
	}
	if n := rdb.XPending(ctx, parts[0].Orders, "g").Val().Count; n != 3 {
		t.Errorf("%d entries pending after the Router acked them, want 3 (the subscriber sends no XACK)", n)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the Redis client after the Router closed: %v, want it open", err)
	}
}

// Close ends the subscription at once, even while a message is being handled, whose context ends; a
// subscription also ends with its context. A closed subscriber cannot subscribe again.
func TestSubscriberCloseEndsTheSubscription(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", "p"}})
	s := newTestSubscriber(t, rdb, parts)
	msgs := subscribe(t, s)
	msg := receive(t, msgs) // and never acked
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the message in hand")
	}
	if _, ok := <-msgs; ok {
		t.Error("a message after Close, want the channel closed")
	}
	if msg.Context().Err() == nil {
		t.Error("the message in hand keeps a live context after Close")
	}
	if _, err := s.Subscribe(ctx, "orders"); !errors.Is(err, ErrSubscriberClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrSubscriberClosed", err)
	}

	subCtx, cancel := context.WithCancel(ctx)
	other, err := newTestSubscriber(t, rdb, parts).Subscribe(subCtx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-other:
		if ok {
			t.Error("a message after the subscription's context ended")
		}
	case <-time.After(5 * time.Second):
		t.Error("the channel is still open 5 s after the subscription's context ended")
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	err := SubscriberConfig{}.Validate()
	for _, want := range []string{"partitions", "consumer group", "consumer name", "ClaimIdle", "ReplayFrom"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("empty config: %v, want it to name %s", err, want)
		}
	}
}
