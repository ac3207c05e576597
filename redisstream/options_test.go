package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wrs "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// An entry over MaxEntryBytes never reaches the subscriber: it is moved to the poison stream inside Redis
// (PoisonTopicOf by default, PoisonTopic partitioned as the topic when set) and acked; the entries around
// it are handed out.
func TestAnOversizedEntryGoesToThePoisonStreamNotToTheSubscriber(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         redisstream.SubscriberConfig
		topic       string
		stream      string // the partition written to
		poisonTopic string
	}{
		{"default poison topic", redisstream.SubscriberConfig{}, "t", "t", "{t}:poison"},
		{"PoisonTopic, partitioned", redisstream.SubscriberConfig{PoisonTopic: "t-poison", Partitions: 2}, "t", "t:{1}", "t-poison:{1}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			big := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: tc.stream, Values: []any{"payload", strings.Repeat("x", 2000)}}).Val()
			small := publish(t, rdb, tc.stream, 1)[0]
			cfg := tc.cfg
			cfg.Client, cfg.ConsumerGroup, cfg.MaxEntryBytes = rdb, "g", 1000
			out := subscribe(t, newSubscriber(t, cfg), tc.topic)
			if m := receive(t, out); m.UUID != small.UUID {
				t.Fatalf("handed out %s (payload of %d bytes), want the small entry %s", m.UUID, len(m.Payload), small.UUID)
			} else {
				m.Ack()
			}
			poison := rdb.XRange(t.Context(), tc.poisonTopic, "-", "+").Val()
			if len(poison) != 1 || poison[0].Values["poison_source_id"] != big {
				t.Fatalf("%s holds %v, want the oversized entry %s", tc.poisonTopic, poison, big)
			}
			eventually(t, "both entries acked", func() bool { return pendingCount(t, rdb, tc.stream, "g") == 0 })
		})
	}
}

// With HandlingContext, a message being handled when its subscription ends (a Router closes its subscribers
// first) keeps its context until HandlingContext ends; without it, the context ends with the subscription.
func TestHandlingContextOutlivesTheSubscription(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 1)
	handling, stop := context.WithCancelCause(context.Background())
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", HandlingContext: handling})
	m := receive(t, subscribe(t, sub, "t"))
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Context().Err(); err != nil {
		t.Fatalf("the message's context ended with the subscription (%v), want it kept until HandlingContext ends", err)
	}
	drained := errors.New("shutdown timeout")
	stop(drained)
	if !errors.Is(context.Cause(m.Context()), drained) {
		t.Fatalf("the message's context: %v, want it ended with HandlingContext's cause", context.Cause(m.Context()))
	}
}

// ReleasedByHandler, as the worker runs it: the handler frees each place (Release), a nack leaves the entry
// pending for a claim instead of handing the message out again, and an ack acks it in Redis.
func TestReleasedByHandlerLeavesANackedEntryPendingAndAcksAnAcked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sent := publish(t, rdb, "t", 2)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", MaxInFlight: 1,
		ReleasedByHandler: true, MaxIdleTime: time.Hour})
	out := subscribe(t, sub, "t")
	first := receive(t, out)
	failed := errors.New("handed back")
	sub.Release(first, failed)
	first.Nack()
	second := receive(t, out) // the one place is free again: Release freed it
	if first.UUID != sent[0].UUID || second.UUID != sent[1].UUID {
		t.Fatalf("got %s then %s, want %s then %s", first.UUID, second.UUID, sent[0].UUID, sent[1].UUID)
	}
	sub.Release(second, nil)
	second.Ack()
	if err := sub.FlushAcks(t.Context()); err != nil {
		t.Fatal(err)
	}
	pending := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: "t", Group: "g", Start: "-", End: "+", Count: 10}).Val()
	if len(pending) != 1 || pending[0].ID != redisstream.EntryID(first) {
		t.Fatalf("pending %v, want the nacked entry %s alone", pending, redisstream.EntryID(first))
	}
	select {
	case m := <-out:
		t.Fatalf("%s handed out again after a nack, want it left pending", m.UUID)
	case <-time.After(200 * time.Millisecond):
	}
}

// ReleaseMiddleware in a Router, as the worker runs it: with one place in flight, a handler that fails,
// one that panics and one that succeeds each free the place for the next message; the succeeded one's
// entry is acked in Redis, the two others stay pending for a claim. Without the middleware the first
// message would hold the one place forever.
func TestReleaseMiddlewareFreesEachPlaceInARouter(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sent := publish(t, rdb, "t", 3)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", MaxInFlight: 1,
		ReleasedByHandler: true, MaxIdleTime: time.Hour})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	handled, entries := make(chan string, 3), make([]string, 0, 3)
	h := router.AddConsumerHandler("h", "t", sub, func(msg *message.Message) error {
		entries = append(entries, redisstream.EntryID(msg)) // one at a time: one place in flight
		handled <- msg.UUID
		switch calls.Add(1) {
		case 1:
			return errors.New("failed")
		case 2:
			panic("the handler panics")
		}
		return nil
	})
	h.AddMiddleware(sub.ReleaseMiddleware)
	go func() { _ = router.Run(t.Context()) }()
	defer router.Close()
	for i := range sent {
		select {
		case got := <-handled:
			if got != sent[i].UUID {
				t.Fatalf("message %d: %s, want %s", i, got, sent[i].UUID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not handled within 5 s: the place in flight was not freed", i)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pending := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: "t", Group: "g", Start: "-", End: "+", Count: 10}).Val()
		ids := make([]string, len(pending))
		for i, p := range pending {
			ids[i] = p.ID
		}
		if reflect.DeepEqual(ids, entries[:2]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %v, want the failed and the panicked entries alone", ids)
		}
	}
}

// With KeyspaceEvents, an idle subscription waits for an XADD's event instead of polling its stream every
// 100 ms (a read, or a look with the peeker), and still gets what is published.
func TestKeyspaceEventsStopTheIdlePolling(t *testing.T) {
	rdb := redistest.Start(t).Client()
	calls := func() int { return commandCalls(t, rdb, "evalsha") + commandCalls(t, rdb, "xinfo|groups") }
	// idle counts the reads and looks of a subscription alone on the server for 1 s.
	idle := func(cfg redisstream.SubscriberConfig) (int, *redisstream.Subscriber, func()) {
		sub := newSubscriber(t, cfg)
		out := subscribe(t, sub, cfg.ConsumerGroup+"-topic")
		time.Sleep(300 * time.Millisecond) // settle: the first reads, and the events subscribed
		before := calls()
		time.Sleep(time.Second)
		n := calls() - before
		return n, sub, func() {
			sent := publish(t, rdb, cfg.ConsumerGroup+"-topic", 1)[0]
			if m := receive(t, out); m.UUID != sent.UUID {
				t.Fatalf("got %s, want %s", m.UUID, sent.UUID)
			}
		}
	}
	polled, polling, _ := idle(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "polls"})
	if err := polling.Close(); err != nil {
		t.Fatal(err)
	}
	waited, _, publishOne := idle(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "waits",
		KeyspaceEvents: redisstream.KeyspaceEventsAuto})
	if polled < 5 || waited >= polled/2 {
		t.Fatalf("reads and looks in 1 s idle: %d polling, %d with keyspace events; want polling at least 5 and the events "+
			"under half of that", polled, waited)
	}
	publishOne()
}

// Partitions: 1 is one stream with a hash tag (what a Redis Cluster needs), 0 the stream named as the topic.
func TestOnePartitionIsATaggedStream(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sent := publish(t, rdb, redisstream.PartitionTopic("orders", 0), 1)[0]
	m := receive(t, subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Partitions: 1}), "orders"))
	if m.UUID != sent.UUID || redisstream.Stream(m) != "orders:{0}" {
		t.Fatalf("got %s from %s, want %s from orders:{0}", m.UUID, redisstream.Stream(m), sent.UUID)
	}
	m.Ack()
}

// A second subscription of a topic on the same Subscriber (one consumer name) does not hand out again what
// the first one has in flight, and Close ends both.
func TestASecondSubscriptionOfATopicHandsOutNothingInFlight(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "t", 2)
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
		ClaimInterval: 50 * time.Millisecond, MaxIdleTime: time.Hour})
	first := subscribe(t, sub, "t")
	held := []*message.Message{receive(t, first), receive(t, first)}
	second := subscribe(t, sub, "t")
	select {
	case m := <-second:
		t.Fatalf("the second subscription handed out %s, which the first has in flight", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	for _, m := range held {
		m.Ack()
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan *message.Message{first, second} {
		for range ch { // drained until closed
		}
	}
	eventually(t, "both entries acked", func() bool { return pendingCount(t, rdb, "t", "g") == 0 })
}

// A user swaps watermill-redisstream for this package by changing the import: every field of its configs is
// here, with the same type.
func TestEveryFieldOfWatermillRedisstreamsConfigsIsHere(t *testing.T) {
	for _, c := range []struct{ theirs, ours reflect.Type }{
		{reflect.TypeFor[wrs.SubscriberConfig](), reflect.TypeFor[redisstream.SubscriberConfig]()},
		{reflect.TypeFor[wrs.PublisherConfig](), reflect.TypeFor[redisstream.PublisherConfig]()},
	} {
		for i := range c.theirs.NumField() {
			f := c.theirs.Field(i)
			if g, ok := c.ours.FieldByName(f.Name); !ok || g.Type != f.Type {
				t.Errorf("%s.%s %s: ours is missing or of another type", c.ours.Name(), f.Name, f.Type)
			}
		}
	}
}

// ShouldClaimPendingMessage, as in watermill-redisstream, is asked about each entry idle past MaxIdleTime
// before a claim: one it refuses stays with its consumer, the others are claimed with their delivery
// counts; the size check and the report of deleted entries hold for the chosen as for any claim.
func TestShouldClaimPendingMessageChoosesTheEntriesClaimed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := t.Context()
	sent := publish(t, rdb, "t", 3)
	big := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "t", Values: []any{"payload", strings.Repeat("x", 2000)}}).Val()
	gone := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "t", Values: []any{"payload", "deleted"}}).Val()
	if err := rdb.XGroupCreate(ctx, "t", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{"t", ">"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb.XDel(ctx, "t", gone)
	left := read[0].Messages[1].ID // sent[1]'s entry: its consumer is alive, says the health check
	var mu sync.Mutex
	asked := map[string]int{}
	idle := 200 * time.Millisecond
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "alive",
		MaxIdleTime: idle, ClaimInterval: 20 * time.Millisecond, MaxEntryBytes: 1000,
		ShouldClaimPendingMessage: func(p redis.XPendingExt) bool {
			mu.Lock()
			defer mu.Unlock()
			if p.Consumer == "dead" && p.Idle >= idle {
				asked[p.ID]++
			} else {
				asked["wrong: "+p.Consumer+" "+p.Idle.String()]++
			}
			return p.ID != left
		}})
	out := subscribe(t, sub, "t")
	for _, want := range []*message.Message{sent[0], sent[2]} {
		m := receive(t, out)
		if m.UUID != want.UUID || redisstream.Deliveries(m) != 2 {
			t.Fatalf("claimed %s with %d deliveries, want %s with 2", m.UUID, redisstream.Deliveries(m), want.UUID)
		}
		m.Ack()
	}
	eventually(t, "the refused entry asked about in two claim rounds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asked[left] >= 2
	})
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "t", Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != left || pending[0].Consumer != "dead" || pending[0].RetryCount != 1 {
		t.Errorf("pending %+v, want only %s, still the dead consumer's, delivered once", pending, left)
	}
	if poison := rdb.XRange(ctx, "{t}:poison", "-", "+").Val(); len(poison) != 1 || poison[0].Values["poison_source_id"] != big {
		t.Errorf("poison stream %v, want the oversized entry %s", poison, big)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range asked {
		if strings.HasPrefix(id, "wrong") {
			t.Errorf("asked about an entry not idle for MaxIdleTime or not the dead consumer's: %s", id)
		}
	}
}

// An entry acked and deleted after a claim round listed it (another owner poisoned it, or a trim after a late
// ack) is not reported as an order lost: only an entry deleted while still pending is.
func TestAChosenEntryAckedMeanwhileIsNotReportedLost(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := t.Context()
	publish(t, rdb, "t", 1)
	if err := rdb.XGroupCreate(ctx, "t", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{"t", ">"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	id := read[0].Messages[0].ID
	var logs syncBuffer
	asked := make(chan struct{}, 100)
	idle := 100 * time.Millisecond
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "alive",
		MaxIdleTime: idle, ClaimInterval: 20 * time.Millisecond,
		ShouldClaimPendingMessage: func(p redis.XPendingExt) bool {
			rdb.XAck(ctx, "t", "g", p.ID) // settled elsewhere between the listing and the claim
			rdb.XDel(ctx, "t", p.ID)
			asked <- struct{}{}
			return true
		}}, slogAdapter{slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	subscribe(t, sub, "t")
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle entry was never offered to ShouldClaimPendingMessage")
	}
	time.Sleep(200 * time.Millisecond) // the claim of the chosen entry, and a round more
	if strings.Contains(logs.String(), "their orders are lost") || strings.Contains(logs.String(), id) {
		t.Errorf("an entry acked before the claim was reported deleted while pending:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// slogAdapter is a Watermill logger that hands the subscriber its slog.Logger (NewSubscriber's Slog()).
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Slog() *slog.Logger                               { return a.l }
func (slogAdapter) Error(string, error, watermill.LogFields)           {}
func (slogAdapter) Info(string, watermill.LogFields)                   {}
func (slogAdapter) Debug(string, watermill.LogFields)                  {}
func (slogAdapter) Trace(string, watermill.LogFields)                  {}
func (a slogAdapter) With(watermill.LogFields) watermill.LoggerAdapter { return a }

// ShouldStopOnReadErrors, as in watermill-redisstream, is asked about each failed read: true ends the
// subscription (its channel closes), false reads again; for a group's subscription and a fan-out alike.
func TestShouldStopOnReadErrorsSaysWhetherAFailedReadEndsTheSubscription(t *testing.T) {
	for _, group := range []string{"g", ""} {
		for _, stop := range []bool{true, false} {
			t.Run(fmt.Sprintf("group=%s/stop=%t", group, stop), func(t *testing.T) {
				rdb := redistest.Start(t).Client()
				publish(t, rdb, "t", 1)
				failed := make(chan error, 100)
				sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: group, FanOutOldestId: "0",
					BlockTime: 10 * time.Millisecond, ShouldStopOnReadErrors: func(err error) bool {
						select {
						case failed <- err:
						default:
						}
						return stop
					}})
				out := subscribe(t, sub, "t")
				receive(t, out).Ack()
				rdb.Del(t.Context(), "t")
				rdb.Set(t.Context(), "t", "not a stream", 0) // every read of t fails now: WRONGTYPE
				for range 2 {
					select {
					case err := <-failed:
						if !strings.Contains(err.Error(), "WRONGTYPE") {
							t.Fatalf("asked about %v, want the read's WRONGTYPE", err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("not asked about a failed read within 10 s")
					}
					if stop {
						break
					}
				}
				if !stop {
					select {
					case _, ok := <-out:
						t.Fatalf("the subscription ended (or handed a message out: %t) after failed reads it was told to go on after", ok)
					default:
						return
					}
				}
				select {
				case _, ok := <-out:
					if ok {
						t.Fatal("handed a message out after a failed read that ends the subscription")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the subscription did not end within 10 s of a failed read that ends it")
				}
			})
		}
	}
}
