package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
)

// The idle cost of comparison 9: 16 topics subscribed through one Router and one subscriber, nothing
// published, for PubSubIdle (10 s). Each Pub/Sub before its first message and after some traffic:
// watermill-redisstream's first read of a subscription blocks until an entry comes, its later reads time
// out every 100 ms (its BlockTime); and the server with nobody subscribed, the floor.

const pubSubIdleTopics = 16

// pubSubIdleCase is a row of the idle table: contender nil is nobody subscribed.
type pubSubIdleCase struct {
	name       string
	contender  *pubSubContender
	hadTraffic bool // a message on every topic, handled and acked, before the measurement
}

func pubSubIdleCases() []pubSubIdleCase {
	cases := []pubSubIdleCase{{name: "nobody subscribed"}}
	for i := range pubSubContenders {
		c := &pubSubContenders[i]
		cases = append(cases, pubSubIdleCase{c.name + ", before its first message", c, false},
			pubSubIdleCase{c.name + ", after traffic", c, true})
	}
	return append(cases, pubSubIdleCase{pubSubEvents.name + ", after traffic", &pubSubEvents, true})
}

// pubSubEvents is ours with KeyspaceEvents auto: an idle subscription waits for an XADD's event rather
// than polling (it turns the server's keyspace events on, which the other cases then have too: nothing is
// published while they are measured, so they cost nothing).
var pubSubEvents = pubSubContender{"stockflow redisstream, KeyspaceEvents auto",
	func(rdb redis.UniversalClient, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
		return redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: group,
			Consumer: pubSubConsumer, KeyspaceEvents: redisstream.KeyspaceEventsAuto}, logger)
	}}

func (b *bench) pubSubIdle(ctx context.Context) error {
	t := b.addTable(&Table{ID: "pubsub-idle", Title: "9. Pub/Sub: idle subscriptions",
		Setup: fmt.Sprintf("%d topics, one subscriber, one Router, nothing published: Redis over %s", pubSubIdleTopics, b.cfg.PubSubIdle),
		Columns: []Column{{Key: "redis_cpu_pct", Header: "Redis CPU % of a core", Digits: 2},
			{Key: "commands_per_s", Header: "commands/s", Digits: 1}}})
	cases := pubSubIdleCases()
	return interleave(b.cfg.Rounds, len(cases), func(round, i int) error {
		return b.pubSubIdleRound(ctx, t, cases[i], round)
	})
}

// pubSubIdleRound measures one case on fresh topics.
func (b *bench) pubSubIdleRound(ctx context.Context, t *Table, ic pubSubIdleCase, round int) error {
	if err := b.main.FlushAll(ctx).Err(); err != nil {
		return err
	}
	if ic.contender != nil {
		r, err := b.startIdle(ctx, ic, round)
		if err != nil {
			return fmt.Errorf("pubsub-idle %s: %w", ic.name, err)
		}
		defer func() {
			_, err := r.close()
			b.checks.expect("pubsub-idle "+ic.contender.name+": the Router closes within 30 s", err == nil, "round %d: %v", round+1, err)
		}()
	}
	time.Sleep(time.Second) // past the start: groups created, first reads, a reader's wait after its message
	if err := b.main.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	looks := b.groupLooks.Load()
	window := b.cfg.PubSubIdle
	cpu, err := b.measureCPU(ctx, []string{b.mainAddr}, nil, func() error { time.Sleep(window); return nil })
	if err != nil {
		return err
	}
	stats, err := b.commandStats(ctx)
	if err != nil {
		return err
	}
	_, commands := stats.contenders(b.groupLooks.Load() - looks)
	v := map[string]float64{"redis_cpu_pct": 100 * cpu.redis.Seconds() / window.Seconds(), "commands_per_s": commands / window.Seconds()}
	b.progress("pubsub-idle round %d/%d %-52s Redis %5.2f %% of a core, %6.1f commands/s; per s, calls × µs each: %s", round+1,
		b.cfg.Rounds, ic.name, v["redis_cpu_pct"], v["commands_per_s"], stats.topCommands(window.Seconds(), 4))
	t.add(ic.name, v)
	return nil
}

// startIdle starts the Router of ic's contender on the idle topics and, for a case after traffic, has it
// handle one message on each.
func (b *bench) startIdle(ctx context.Context, ic pubSubIdleCase, round int) (*routed, error) {
	topics := make([]string, pubSubIdleTopics)
	for i := range topics {
		topics[i] = fmt.Sprintf("pubsub-idle-%d", i)
	}
	tl := newTally(len(topics))
	r, err := b.newRouted(*ic.contender, "idle", topics, tl)
	if err != nil {
		return nil, err
	}
	r.run(ctx)
	select {
	case <-r.router.Running(): // every topic subscribed, its group created
	case <-time.After(30 * time.Second):
		_, _ = r.close()
		return nil, fmt.Errorf("the Router was not running 30 s after its start")
	}
	if !ic.hadTraffic {
		return r, nil
	}
	for i, topic := range topics {
		if err := b.publishMessages(topic, pubSubMessage(ctx, i)); err != nil {
			_, _ = r.close()
			return nil, err
		}
	}
	if err := b.waitAcked(ctx, tl, "idle", topics); err != nil {
		_, _ = r.close()
		return nil, err
	}
	b.expectTally("pubsub-idle "+ic.name, tl, round)
	return r, nil
}
