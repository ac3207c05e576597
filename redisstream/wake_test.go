package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// With KeyspaceEventsAuto, keyspace events that an operator turns off while the worker runs (CONFIG SET
// notify-keyspace-events "") are turned on again, with a warning, once the read of every partition every
// idlePoll finds an entry whose event never came: a trickle of orders waited for that read, a second on
// average, for good.
func TestAutoEventsTurnedOffWhileIdleAreTurnedOnAgain(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	var logs syncBuffer
	msgs := subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *readerConfig) {
		c.Events, c.Logger = KeyspaceEventsAuto, slog.New(slog.NewTextHandler(&logs, nil))
	}))
	awaitSubscribed(t, rdb, KeyspaceChannel(0, threeParts[1].Orders))
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // the first one is found within idlePoll (2 s); receive waits 5 s
		p := threeParts[1]
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val()
		if msg := receive(t, msgs); msg.UUID != id {
			t.Fatalf("received %s, want %s", msg.UUID, id)
		} else {
			done(t, rdb, msg)
		}
		if streamEventsOn(t, rdb) {
			break
		}
	}
	if !streamEventsOn(t, rdb) {
		t.Fatalf("notify-keyspace-events %q after 4 entries found without their events, want K and t turned on again",
			rdb.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"])
	}
	awaitSubscribed(t, rdb, KeyspaceChannel(0, threeParts[1].Orders)) // waiting for events still, not polling
	if n := strings.Count(logs.String(), "turned them on again"); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("logs %q: want one warning that the events were turned on again", logs.String())
	}
}

// With KeyspaceEventsAuto, keyspace events turned off while the worker runs and CONFIG refused by then (ACL): the
// subscriber polls instead, with a warning, rather than wait for events that never come.
func TestAutoEventsTurnedOffWhileIdleAndConfigRefusedMakeTheSubscriberPoll(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	var logs syncBuffer
	msgs := subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *readerConfig) {
		c.Events, c.Logger = KeyspaceEventsAuto, slog.New(slog.NewTextHandler(&logs, nil))
	}))
	channel := KeyspaceChannel(0, threeParts[1].Orders)
	awaitSubscribed(t, rdb, channel)
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "ACL", "SETUSER", "default", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4 && rdb.PubSubNumSub(ctx, channel).Val()[channel] > 0; i++ {
		id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[1].Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val()
		if msg := receive(t, msgs); msg.UUID != id {
			t.Fatalf("received %s, want %s", msg.UUID, id)
		} else {
			done(t, rdb, msg)
		}
	}
	if n := rdb.PubSubNumSub(ctx, channel).Val()[channel]; n != 0 || !strings.Contains(logs.String(), "idle consumers poll") {
		t.Fatalf("%d subscribers of %s, logs %q; want the subscriber polling, and saying so", n, channel, logs.String())
	}
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[0].Orders, Values: []string{"payload", "polled"}}).Val()
	if msg := receive(t, msgs); msg.UUID != id {
		t.Fatalf("received %s, want %s", msg.UUID, id)
	}
}

// awaitSubscribed waits until some client is subscribed to channel (an idle subscriber waiting for events),
// failing the test after 5 s.
func awaitSubscribed(t *testing.T, rdb *redis.Client, channel string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); rdb.PubSubNumSub(context.Background(), channel).Val()[channel] == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber of %s within 5 s", channel)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamEventsOn reports whether Redis publishes the keyspace events of streams.
func streamEventsOn(t *testing.T, rdb *redis.Client) bool {
	t.Helper()
	flags, err := rdb.ConfigGet(context.Background(), "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(flags["notify-keyspace-events"], "K") && strings.ContainsAny(flags["notify-keyspace-events"], "tA")
}
