package redisstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// idleTopics subscribes n topics through one Subscriber whose claim rounds come once a minute, so that
// only the looks of an idle subscription can find a new entry, and waits until every subscription polls
// at its longest pause.
func idleTopics(t *testing.T, rdb *redis.Client, n int) []<-chan *message.Message {
	t.Helper()
	sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
		ClaimInterval: time.Minute})
	outs := make([]<-chan *message.Message, n)
	for i := range outs {
		outs[i] = subscribe(t, sub, fmt.Sprintf("idle-%d", i))
	}
	time.Sleep(time.Second)
	return outs
}

// Idle subscriptions of one Subscriber look for entries together, in one pipeline of XINFO GROUPS every
// 100 ms, instead of each calling fetch.lua on its stream every 100 ms (16 topics cost ~1 % of a Redis
// core that way), and an entry published while they wait still comes at once.
func TestIdleSubscriptionsLookForEntriesTogether(t *testing.T) {
	srv := redistest.Start(t)
	for _, protocol := range []int{3, 2} { // XINFO GROUPS replies maps, or lists of names and values
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			opts := *srv.Client().Options()
			opts.Protocol = protocol
			rdb := redis.NewClient(&opts)
			t.Cleanup(func() { _ = rdb.Close() })
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			idleTopicsLookTogether(t, rdb)
		})
	}
}

func idleTopicsLookTogether(t *testing.T, rdb *redis.Client) {
	const topics = 8
	outs := idleTopics(t, rdb, topics)
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	scripts, looks := commandCalls(t, rdb, "evalsha")+commandCalls(t, rdb, "eval"), commandCalls(t, rdb, "xinfo|groups")
	t.Logf("in 2 s idle, %d topics: %d script calls, %d XINFO GROUPS", topics, scripts, looks)
	if scripts > topics {
		t.Errorf("%d script calls in 2 s from %d idle topics: each still reads on its own (%d a topic reading every 100 ms)",
			scripts, topics, topics*20)
	}
	if looks < topics*5 {
		t.Errorf("%d XINFO GROUPS in 2 s for %d idle topics: they are not looked at every 100 ms", looks, topics)
	}
	sent := publish(t, rdb, "idle-5", 1)[0]
	if got := receive(t, outs[5]); got.UUID != sent.UUID {
		t.Errorf("received %s, want %s", got.UUID, sent.UUID)
	}
}

// A group whose lag Redis cannot tell (null: a deleted entry ahead of it) is read: the entries around the
// deleted one come.
func TestAnIdleSubscriptionReadsAStreamWhoseLagIsUnknown(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	out := idleTopics(t, rdb, 1)[0]
	ids := []string{"1-1", "1-2", "1-3"}
	_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error { // one step: no look sees the middle one
		for i, id := range ids {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "idle-0", ID: id, Values: []string{"payload", fmt.Sprint(i)}})
		}
		pipe.XDel(ctx, "idle-0", ids[1])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := rdb.XInfoGroups(ctx, "idle-0").Result()
	if err != nil || len(groups) != 1 || groups[0].Lag != -1 && groups[0].LastDeliveredID == "0-0" {
		t.Fatalf("the group's lag should be unknown before the subscription reads: %+v %v", groups, err)
	}
	for _, want := range []string{ids[0], ids[2]} {
		if got := redisstream.EntryID(receive(t, out)); got != want {
			t.Errorf("received entry %s, want %s", got, want)
		}
	}
}
