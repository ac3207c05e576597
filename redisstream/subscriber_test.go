package redisstream_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func newSubscriber(t *testing.T, cfg redisstream.SubscriberConfig) *redisstream.Subscriber {
	t.Helper()
	sub, err := redisstream.NewSubscriber(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func subscribe(t *testing.T, sub *redisstream.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	out, err := sub.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func publish(t *testing.T, rdb redis.UniversalClient, topic string, n int) []*message.Message {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func receive(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-out:
		if !ok {
			t.Fatal("the channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
	}
	return nil
}

func pendingCount(t *testing.T, rdb redis.UniversalClient, stream, group string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func commandCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func TestAcksGoToRedisManyInOneXACK(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 500)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"})
	out := subscribe(t, sub, "t")
	var msgs []*message.Message
	for range 500 {
		msgs = append(msgs, receive(t, out))
	}
	if n := pendingCount(t, rdb, "t", "g"); n != 500 {
		t.Fatalf("%d entries pending before any ack, want 500", n)
	}
	for _, m := range msgs {
		m.Ack()
	}
	eventually(t, "every entry acked in Redis", func() bool { return pendingCount(t, rdb, "t", "g") == 0 })
	calls := commandCalls(t, rdb, "xack")
	t.Logf("%d XACK calls", calls)
	if calls > 250 {
		t.Errorf("%d XACK calls for 500 acks given at once: acks are not batched", calls)
	}
}

func TestAMessagesContextEndsAtItsAckOrNack(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 2)
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g"}), "t")
	for _, settle := range []func(*message.Message) bool{(*message.Message).Ack, (*message.Message).Nack} {
		m := receive(t, out)
		if m.Context().Err() != nil {
			t.Fatal("the context ended before the ack or nack")
		}
		settle(m)
		select {
		case <-m.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the context did not end at the ack or nack")
		}
	}
}

func TestANackedMessageComesBackAtOnceWithItsUUID(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sentMsgs := publish(t, rdb, "t", 1)
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g"}), "t")
	first := receive(t, out)
	first.Nack()
	again := receive(t, out)
	if again.UUID != sentMsgs[0].UUID || redisstream.EntryID(again) != redisstream.EntryID(first) {
		t.Fatalf("got %s (entry %s), want %s (entry %s)", again.UUID, redisstream.EntryID(again), sentMsgs[0].UUID, redisstream.EntryID(first))
	}
	if d := redisstream.Deliveries(again); d != 1 {
		t.Errorf("deliveries %d after an in-process resend, want 1 (Redis delivered it once)", d)
	}
	again.Ack()
	eventually(t, "the entry acked", func() bool { return pendingCount(t, rdb, "t", "g") == 0 })
}

func TestARestartedConsumerReadsWhatItLeftPendingAtOnce(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sentMsgs := publish(t, rdb, "t", 3)
	cfg := redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "pod-1", MaxIdleTime: time.Hour}
	first := newSubscriber(t, cfg)
	out := subscribe(t, first, "t")
	receive(t, out).Ack()
	receive(t, out) // handed out, never acked: the process "dies"
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one entry acked", func() bool { return pendingCount(t, rdb, "t", "g") <= 2 })

	out = subscribe(t, newSubscriber(t, cfg), "t")
	got := map[string]bool{}
	for range 2 {
		m := receive(t, out)
		got[m.UUID] = true
		m.Ack()
	}
	if !got[sentMsgs[1].UUID] || !got[sentMsgs[2].UUID] {
		t.Fatalf("the restarted consumer got %v, want the second and third messages", got)
	}
}

func TestADeadConsumersEntriesAreClaimedWithTheirDeliveryCount(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sentMsgs := publish(t, rdb, "t", 1)
	if err := rdb.XGroupCreate(t.Context(), "t", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// A consumer that read the entry and died.
	if err := rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{"t", ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "alive",
		ClaimInterval: 50 * time.Millisecond, MaxIdleTime: 200 * time.Millisecond}), "t")
	m := receive(t, out)
	if m.UUID != sentMsgs[0].UUID || redisstream.Deliveries(m) != 2 {
		t.Fatalf("claimed %s with %d deliveries, want %s with 2", m.UUID, redisstream.Deliveries(m), sentMsgs[0].UUID)
	}
	m.Ack()
	eventually(t, "the claimed entry acked", func() bool { return pendingCount(t, rdb, "t", "g") == 0 })
}

// A topic's partitions are read under its name, by a group and fanned out alike, and each message says
// which partition it came from (EntryPartition, which an answer to it goes by).
func TestPartitionsAreReadUnderOneTopic(t *testing.T) {
	for _, group := range []string{"g", ""} {
		t.Run("group="+group, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			want := map[string]int{}
			for i := range 4 {
				for _, m := range publish(t, rdb, redisstream.PartitionTopic("orders", i), 2) {
					want[m.UUID] = i
				}
			}
			out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: group,
				Partitions: 4, FanOutOldestId: "0"}), "orders")
			for range 8 {
				m := receive(t, out)
				i, ok := want[m.UUID]
				if !ok {
					t.Fatalf("unexpected or repeated message %s", m.UUID)
				}
				if s, p := redisstream.Stream(m), redisstream.EntryPartition(m); s != redisstream.PartitionTopic("orders", i) || p != i {
					t.Errorf("message of partition %d: stream %q, EntryPartition %d", i, s, p)
				}
				delete(want, m.UUID)
				m.Ack()
			}
		})
	}
}

func TestEntriesWithoutWatermillsFieldsAreReadAndBadOnesMarked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	plain := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: "t", Values: []any{"payload", `{"order_id":"o-1"}`}}).Val()
	bad := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: "t", Values: []any{redisstream.UUIDHeaderKey, "u-1",
		"metadata", "\xc1not msgpack", "payload", "p"}}).Val()
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g"}), "t")
	m := receive(t, out)
	if m.UUID != plain || string(m.Payload) != `{"order_id":"o-1"}` || m.Metadata.Get(redisstream.UnmarshalError) != "" {
		t.Errorf("plain entry: UUID %s payload %q error %q; want the entry id %s as UUID", m.UUID, m.Payload,
			m.Metadata.Get(redisstream.UnmarshalError), plain)
	}
	m.Ack()
	m = receive(t, out)
	if m.UUID != bad || string(m.Payload) != "p" || m.Metadata.Get(redisstream.UnmarshalError) == "" {
		t.Errorf("bad entry: UUID %s payload %q error %q; want it marked, with the entry id %s", m.UUID, m.Payload,
			m.Metadata.Get(redisstream.UnmarshalError), bad)
	}
	m.Ack()
}

func TestCloseEndsEverySubscriptionAndSendsTheAcksGiven(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "a", 1)
	publish(t, rdb, "b", 1)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g"})
	a, b := subscribe(t, sub, "a"), subscribe(t, sub, "b")
	receive(t, a).Ack()
	unacked := receive(t, b)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan *message.Message{a, b} {
		if _, open := <-ch; open {
			t.Fatal("a subscription's channel is still open after Close")
		}
	}
	if unacked.Context().Err() == nil {
		t.Error("an unacked message's context outlived Close")
	}
	if n := pendingCount(t, rdb, "a", "g"); n != 0 {
		t.Errorf("%d entries of a pending: the ack given before Close was not sent", n)
	}
	if n := pendingCount(t, rdb, "b", "g"); n != 1 {
		t.Errorf("%d entries of b pending, want the unacked one", n)
	}
	if _, err := sub.Subscribe(context.Background(), "a"); err == nil {
		t.Error("Subscribe after Close succeeded")
	}
}

func TestNoMoreThanMaxInFlightMessagesAreOutUnacked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 20)
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", MaxInFlight: 5}), "t")
	var held []*message.Message
	for range 5 {
		held = append(held, receive(t, out))
	}
	select {
	case m := <-out:
		t.Fatalf("a sixth message %s came out with 5 unacked", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	if n := pendingCount(t, rdb, "t", "g"); n != 5 {
		t.Errorf("%d entries read from Redis with 5 out, want 5", n)
	}
	held[0].Ack()
	receive(t, out).Ack()
}

func TestSettingsThatCannotWorkAreRefusedByName(t *testing.T) {
	_, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{BlockTime: -time.Second, MaxInFlight: -1}, nil)
	for _, name := range []string{"Client", "BlockTime", "MaxInFlight"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if _, err := redisstream.NewPublisher(redisstream.PublisherConfig{}, nil); err == nil {
		t.Error("a publisher without a client was accepted")
	}
}

// closeSignal is a subscriber that says when the Router closed it.
type closeSignal struct {
	*redisstream.Subscriber
	closed chan struct{}
}

func (c closeSignal) Close() error {
	defer close(c.closed)
	return c.Subscriber.Close()
}

// Watermill's Router closes its subscribers before it waits for the handlers still running: the acks those
// handlers' messages get after the subscriber closed still reach Redis, so a shutdown hands nothing out again.
func TestTheAcksOfHandlersFinishingAfterCloseAreSent(t *testing.T) {
	rdb := redistest.Start(t).Client()
	const n = 5
	publish(t, rdb, "orders", n)
	sub := closeSignal{newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}), make(chan struct{})}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	started, finish := make(chan struct{}, n), make(chan struct{})
	router.AddConsumerHandler("h", "orders", sub, func(msg *message.Message) error {
		started <- struct{}{}
		<-msg.Context().Done()            // the subscription ended
		time.Sleep(50 * time.Millisecond) // and the subscriber stopped waiting for this message
		<-finish
		return nil
	})
	go func() { _ = router.Run(t.Context()) }()
	for range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the handlers did not all start within 10 s")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- router.Close() }()
	<-sub.closed // the subscriber is closed, the handlers still run
	close(finish)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); pendingCount(t, rdb, "orders", "g") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries still pending 5 s after the Router acked every message, want 0", pendingCount(t, rdb, "orders", "g"))
		}
	}
}

func TestSubscribingAgainDoesNotHandOutAMessageStillHeld(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sentMsgs := publish(t, rdb, "t", 2)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c", MaxIdleTime: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	out, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, out) // still in its handler when the subscription ends
	cancel()
	eventually(t, "the first subscription ended", func() bool {
		select {
		case _, ok := <-out:
			return !ok
		default:
			return false
		}
	})
	// The handler still runs, and writes its message's metadata (Watermill's PoisonQueue does) while the
	// Subscriber looks at what is out: the race detector holds that it reads no message meanwhile.
	stop, written := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				held.Metadata.Set("handler_note", strconv.Itoa(i))
			}
		}
	}()
	again := subscribe(t, sub, "t")
	close(stop)
	<-written
	m := receive(t, again)
	if m.UUID == held.UUID {
		t.Fatalf("the message %s still held by its handler was handed out again", held.UUID)
	}
	if m.UUID != sentMsgs[1].UUID {
		t.Fatalf("got %s, want the second message %s", m.UUID, sentMsgs[1].UUID)
	}
	m.Ack()
	held.Ack()
	eventually(t, "both entries acked", func() bool { return pendingCount(t, rdb, "t", "g") == 0 })
	select {
	case m := <-again:
		t.Fatalf("message %s handed out again after its ack", m.UUID)
	case <-time.After(500 * time.Millisecond):
	}
}

// slowAcks delays every XACK of its client by d.
type slowAcks struct{ d time.Duration }

func (slowAcks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowAcks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xack" {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}
func (h slowAcks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "xack" {
				time.Sleep(h.d)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func TestSubscribingAgainAfterAnAckSendsTheAckFirst(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 1)
	slow := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = slow.Close() })
	slow.AddHook(slowAcks{500 * time.Millisecond})
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: slow, ConsumerGroup: "g", Consumer: "c", MaxIdleTime: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	out, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, out)
	cancel()
	m.Ack() // its XACK takes 500 ms
	time.Sleep(100 * time.Millisecond)
	again := subscribe(t, sub, "t")
	select {
	case m2 := <-again:
		t.Fatalf("message %s acked before the subscription was handed out again", m2.UUID)
	case <-time.After(time.Second):
	}
	if n := pendingCount(t, rdb, "t", "g"); n != 0 {
		t.Fatalf("%d entries pending, want 0", n)
	}
}
