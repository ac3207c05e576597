package redisstream

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

	"github.com/stockflow/stockflow/testkit/redistest"
)

var (
	threeParts   = testParts(3, true)
	sixteenParts = testParts(16, true)
)

// testParts names n partitions of the streams "orders" and "poison" as the worker does: "orders:{i}" when
// tagged, the plain names otherwise (one partition only).
func testParts(n int, tagged bool) []partition {
	if !tagged {
		return []partition{{Orders: "orders", Poison: "poison"}}
	}
	parts := make([]partition, n)
	for i := range parts {
		parts[i] = partition{Index: i, Orders: PartitionTopic("orders", i), Poison: PartitionTopic("poison", i), Partitioned: true}
	}
	return parts
}

// newTestSubscriber is consumer c1 of group g on parts, claiming entries idle for 30 s, changed by change.
func newTestSubscriber(t *testing.T, rdb redis.UniversalClient, parts []partition, change ...func(*readerConfig)) *reader {
	t.Helper()
	cfg := readerConfig{Partitions: parts, Group: "g", Consumer: "c1", PoisonMaxLen: 100, ClaimIdle: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Failing: new(atomic.Int64),
		ReplayFrom: func(time.Time) string { return "0" }}
	for _, c := range change {
		c(&cfg)
	}
	s, err := newReader(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func subscribe(t *testing.T, s *reader) <-chan *message.Message {
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

func createGroups(t *testing.T, rdb redis.UniversalClient, parts ...partition) {
	t.Helper()
	for _, p := range parts {
		if err := rdb.XGroupCreateMkStream(context.Background(), p.Orders, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// At most MaxInFlight messages are out at once; a read waits until half of them are back, then takes as
// many as there is room for.
func TestSubscriberKeepsAtMostMaxInFlightOut(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	for i := range 10 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) { c.MaxInFlight = 4 }))
	var out []*message.Message
	for range 4 {
		out = append(out, receive(t, msgs))
	}
	pending := func() int64 { return rdb.XPending(ctx, parts[0].Orders, "g").Val().Count }
	time.Sleep(200 * time.Millisecond) // time enough to read more, if it would
	if n := pending(); n != 4 {
		t.Fatalf("%d entries pending with 4 out, want 4: no more read than MaxInFlight", n)
	}
	done(t, rdb, out[0])
	time.Sleep(200 * time.Millisecond)
	if n := pending(); n != 3 {
		t.Fatalf("%d entries pending with 3 out, want 3: a read waits for half the places", n)
	}
	done(t, rdb, out[1])
	for range 2 {
		receive(t, msgs)
	}
	if n := pending(); n != 4 {
		t.Fatalf("%d entries pending after two places were freed, want 4", n)
	}
}

// With Released, a message's place is freed by Release, not by its ack: the next message comes only once
// the handler released the one out; a failed one's place comes back after NackPause, one left pending on
// purpose (ErrLeftPending) at once. The router's ack of a released message acks its entry in Redis; a nack
// leaves it pending.
func TestAReleasedSubscriberFreesPlacesOnRelease(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	for i := range 4 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	s := newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.MaxInFlight, c.Released, c.NackPause = 1, true, 300*time.Millisecond
	})
	msgs := subscribe(t, s)
	first := receive(t, msgs)
	first.Ack() // acked, not released
	select {
	case msg := <-msgs:
		t.Fatalf("message %s came while the one out was not released", msg.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	s.Release(first, nil)
	second := receive(t, msgs)
	if err := s.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	if p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: parts[0].Orders, Group: "g", Start: "-", End: "+", Count: 10}).Val(); len(p) != 1 || p[0].ID != EntryID(second) {
		t.Fatalf("pending %v, want only the second entry: the router's ack of the first acks it in Redis", p)
	}
	start := time.Now()
	s.Release(second, errors.New("failed"))
	second.Nack()
	third := receive(t, msgs)
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("the next message came %v after a failed release, want NackPause (300 ms) or more", waited)
	}
	start = time.Now()
	s.Release(third, fmt.Errorf("handed back: %w", ErrLeftPending))
	third.Nack()
	receive(t, msgs)
	if waited := time.Since(start); waited >= 300*time.Millisecond {
		t.Fatalf("the next message came %v after an entry left pending on purpose, want at once", waited)
	}
	if err := s.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XPending(ctx, parts[0].Orders, "g").Val().Count; n != 3 {
		t.Fatalf("%d entries pending, want the 2 nacked and the one out", n)
	}
}

// An idle subscriber turns Redis's keyspace events on and waits for one rather than polling: while no entry
// comes it reads about once per claim round; an XADD wakes it.
func TestIdleSubscriberWaitsForAKeyspaceEvent(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	msgs := subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *readerConfig) { c.Events = KeyspaceEventsAuto }))
	time.Sleep(300 * time.Millisecond) // the first read, the subscription and the read after it
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	// A claim and a read of each partition per claim round (1 s); polling would read every 100 ms.
	if n := scriptCalls(t, rdb); n > 20 {
		t.Errorf("%d script calls in 2 s of idling, want a few: an idle subscriber waits for an event", n)
	}
	if flags := rdb.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]; !strings.Contains(flags, "K") {
		t.Errorf("notify-keyspace-events %q, want the keyspace events turned on", flags)
	}
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[2].Orders, Values: []string{"payload", "woken"}}).Val()
	if msg := receive(t, msgs); msg.UUID != id {
		t.Errorf("received %s, want the new entry %s", msg.UUID, id)
	}
}

// scriptCalls counts the EVALSHA and EVAL calls Redis ran since its statistics were reset.
func scriptCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	return commandCalls(t, rdb, "evalsha", "eval")
}

// commandCalls counts the calls of commands Redis ran since its statistics were reset.
func commandCalls(t *testing.T, rdb *redis.Client, commands ...string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(rdb.Info(context.Background(), "commandstats").Val(), "\n") {
		for _, c := range commands {
			if strings.HasPrefix(line, "cmdstat_"+c+":") {
				var calls int
				_, _ = fmt.Sscanf(line[strings.Index(line, "calls="):], "calls=%d", &calls)
				n += calls
			}
		}
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
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.ClaimIdle, c.ClaimInterval, c.NackPause = time.Second, 10*time.Millisecond, time.Millisecond
	}))
	msg := receive(t, msgs)
	if msg.UUID != first {
		t.Fatalf("first message %s, want %s", msg.UUID, first)
	}
	msg.Nack()
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

// Under a Router, a subscriber sends its entries in order, several at once; the Router's acks ack the
// entries in Redis (batched XACKs); closing the Router ends the subscription without closing the Redis
// client.
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
	sub := newTestSubscriber(t, rdb, parts)
	router.AddConsumerHandler("c1", "orders", sub, func(msg *message.Message) error {
		most.Store(max(most.Load(), inFlight.Add(1)))
		defer inFlight.Add(-1)
		time.Sleep(100 * time.Millisecond)
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
	// The Router acks a message once its handler returned, and the subscriber sends the ack to Redis. (Not
	// after Close: the Router closes the subscriber while handlers may still return, and an ack given once
	// the subscription ended is not sent; the entry is handed out again later.)
	for deadline := time.Now().Add(10 * time.Second); rdb.XPending(ctx, parts[0].Orders, "g").Val().Count != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("entries still pending 10 s after the Router acked them, want none (the Router's ack is an XACK)")
		}
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("router run: %v", err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || most.Load() < 2 {
		t.Errorf("handled %v, at most %d at once; want %v, several at once", got, most.Load(), want)
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
	if _, err := s.Subscribe(ctx, "orders"); !errors.Is(err, errReaderClosed) {
		t.Errorf("Subscribe after Close: %v, want errReaderClosed", err)
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

// With Handling set, the message in hand when the subscription ends (the router closes on SIGTERM) keeps
// its context, so its order finishes, until Handling ends (SHUTDOWN_TIMEOUT), whose cause it then has.
func TestAMessageInHandOutlivesTheSubscriptionUntilHandlingEnds(t *testing.T) {
	rdb := redistest.Start(t).Client()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", "p"}})
	handling, stop := context.WithCancelCause(context.Background())
	s := newTestSubscriber(t, rdb, parts, func(c *readerConfig) { c.Handling = handling })
	msg := receive(t, subscribe(t, s))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := msg.Context().Err(); err != nil {
		t.Fatalf("the message in hand: %v once the subscription ended, want its context alive", err)
	}
	errDeadline := errors.New("shutdown timeout")
	stop(errDeadline)
	select {
	case <-msg.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the message's context outlived Handling")
	}
	if cause := context.Cause(msg.Context()); !errors.Is(cause, errDeadline) {
		t.Fatalf("the message's context ended with %v, want Handling's cause", cause)
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	err := readerConfig{MaxInFlight: -1}.Validate()
	for _, want := range []string{"partitions", "consumer group", "consumer name", "MaxInFlight", "ClaimIdle", "ReplayFrom"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("empty config: %v, want it to name %s", err, want)
		}
	}
}

// A subscriber with fewer places in flight than partitions reads a few partitions at a time: finding those
// empty, it goes on with the next ones rather than waiting for a keyspace event, so a backlog in a later
// partition, which no new entry announces, is read at once (it waited for a claim round per read, and a
// hot partition's backlog crawled at a few entries a second).
func TestASubscriberWithFewPlacesReadsEveryPartitionBeforeIdling(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := sixteenParts
	createGroups(t, rdb, parts...)
	last := parts[len(parts)-1]
	for i := range 20 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: last.Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.MaxInFlight, c.Events = 2, KeyspaceEventsAuto
	}))
	start := time.Now()
	for range 20 {
		msg := receive(t, msgs)
		if err := rdb.XAck(ctx, last.Orders, "g", msg.UUID).Err(); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
	// Waiting for a claim round per read would take seconds; reading on takes milliseconds.
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("20 entries of the last of 16 partitions took %v with 2 places in flight: the reads idled between partitions", took)
	}
}

// With fewer places in flight than partitions a claim round goes over every partition a few at a time:
// entries left pending by a dead consumer in the last of 16 partitions are claimed within a round or two,
// whatever partition the reads stopped at (a round covered only the partitions from there, so an idle
// subscriber claimed the same two partitions round after round).
func TestAClaimRoundCoversEveryPartitionWithFewPlaces(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := sixteenParts
	createGroups(t, rdb, parts...)
	last := parts[len(parts)-1]
	for i := range 4 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: last.Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	// A consumer that died holding them.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{last.Orders, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.MaxInFlight, c.Events, c.ClaimIdle, c.ClaimInterval = 2, KeyspaceEventsAuto, 200*time.Millisecond, 200*time.Millisecond
	}))
	for range 4 {
		msg := receive(t, msgs) // within 5 s: 25 claim rounds
		if err := rdb.XAck(ctx, last.Orders, "g", msg.UUID).Err(); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
}

// An idle subscriber woken by an entry's keyspace event reads the partition of that event, not all of them:
// 20 entries added one at a time to partitions of 16 cost about one read each (a read of every partition,
// and a second to find them empty, cost 32 script calls per entry in every idle worker).
func TestAnEventWakesAReadOfItsPartitionOnly(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := sixteenParts
	createGroups(t, rdb, parts...)
	msgs := subscribe(t, newTestSubscriber(t, rdb, parts, func(c *readerConfig) {
		c.Events, c.ClaimInterval = KeyspaceEventsAuto, time.Minute // no claim round in the count
	}))
	time.Sleep(300 * time.Millisecond) // the first read, the subscription and the read after it
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := parts[(i*7)%len(parts)]
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val()
		msg := receive(t, msgs)
		if msg.UUID != id {
			t.Fatalf("received %s, want %s", msg.UUID, id)
		}
		if err := rdb.XAck(ctx, p.Orders, "g", msg.UUID).Err(); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
	if n := scriptCalls(t, rdb); n > 20*2+16 { // a read of each event's partition, a second one at most, and one read of all (idlePoll)
		t.Fatalf("%d script calls for 20 entries over 16 partitions, want about one per entry", n)
	}
	t.Logf("%d script calls for 20 entries", scriptCalls(t, rdb))
}

// FlushAcks waits for the acks given before it, not for a queue that later messages keep busy: here the
// message released after the flush started never gets the router's verdict, and the flush still returns
// once the first one's ack is sent.
func TestAFlushWaitsForTheAcksBeforeItOnly(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	parts := []partition{{Orders: "orders"}}
	if err := rdb.XGroupCreateMkStream(ctx, "orders", "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "x"}}).Val()
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	a := newAcks(rdb, readerConfig{Group: "g", Partitions: parts, Logger: slog.Default()})
	first := Entry{ID: id, Stream: "orders", Deliveries: 1, Values: map[string]any{"payload": "x"}}.Message()
	a.add(first)              // the sender waits for its verdict
	before := a.queuedSoFar() // what a flush called now waits for (flush is waitFor(queuedSoFar()))
	flushed := make(chan struct{})
	go func() {
		a.waitFor(before)
		close(flushed)
	}()
	for taken := false; !taken; time.Sleep(time.Millisecond) { // the sender has the first in its batch
		a.mu.Lock()
		taken = len(a.queued) == 0
		a.mu.Unlock()
	}
	hung := Entry{ID: "0-1", Stream: "orders", Deliveries: 1, Values: map[string]any{"payload": "y"}}.Message()
	a.add(hung) // never acked nor nacked
	first.Ack()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush waited for a message released after it")
	}
	if n := rdb.XPending(ctx, "orders", "g").Val().Count; n != 0 {
		t.Errorf("%d entries pending after the flush; want the first acked", n)
	}
	hung.Nack()
}

// What a read handed over is noted for at most half the claim idle time, so that an entry handed over
// again by a call made after a lost reply was idle for less than that: no consumer can have claimed it
// meanwhile (this one neither, which would have it out twice).
func TestAReadsNoteOutlivesNoHalfOfTheClaimIdleTime(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	parts := testParts(1, false)
	if err := rdb.XGroupCreateMkStream(ctx, "orders", "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "x"}})
	s := newTestSubscriber(t, rdb, parts, func(c *readerConfig) { c.ClaimIdle = 10 * time.Second })
	receive(t, subscribe(t, s))
	ttl := rdb.PTTL(ctx, FetchedKey("orders", "g", "c1", "read")).Val()
	if ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("the read's note expires in %v; want at most half the claim idle time (5 s)", ttl)
	}
}

// A place in flight is waited for only while the subscription lasts: with every place taken (a call made
// again after a lost reply can hand over more entries than there are places), a message waiting for one
// gives up when the subscription ends, rather than hold its reader (and Close) until a handler is done.
func TestAMessageWaitingForAPlaceGivesUpWhenTheSubscriptionEnds(t *testing.T) {
	s := newTestSubscriber(t, redistest.Start(t).Client(), testParts(1, false), func(c *readerConfig) { c.MaxInFlight = 1 })
	s.slots <- struct{}{} // the one place, taken
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := make(chan bool, 1)
	go func() { sent <- s.send(ctx, make(chan *message.Message), message.NewMessage("u", nil)) }()
	select {
	case ok := <-sent:
		if ok {
			t.Errorf("send reported the message sent")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the message still waits for a place after the subscription ended")
	}
	if n := len(s.slots); n != 1 {
		t.Errorf("%d places taken after the send gave up; want the one it found taken", n)
	}
	<-s.slots
}
