package harness

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredisstream "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
)

// Comparison 9, Pub/Sub: stockflow's redisstream against watermill-redisstream, each built as a user would
// (Client, ConsumerGroup, Consumer; every other setting its default) under a plain Watermill Router whose
// handler only tallies the message and returns nil. The drain: messages published beforehand (with
// watermill-redisstream's publisher, the format both read) are read by a fresh consumer group, from the
// Router's start until Redis has every one of them read and acked. Then what 16 idle subscriptions cost
// (pubsubidle.go).

// pubSubContender builds one Pub/Sub's subscriber on a client of its own (watermill-redisstream's Close
// closes its client).
type pubSubContender struct {
	name       string
	subscriber func(rdb redis.UniversalClient, group string, logger watermill.LoggerAdapter) (message.Subscriber, error)
}

var pubSubContenders = []pubSubContender{
	{"stockflow redisstream", func(rdb redis.UniversalClient, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
		return redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: group, Consumer: pubSubConsumer}, logger)
	}},
	{"watermill-redisstream", func(rdb redis.UniversalClient, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
		return wmredisstream.NewSubscriber(wmredisstream.SubscriberConfig{Client: rdb, ConsumerGroup: group, Consumer: pubSubConsumer}, logger)
	}},
}

const (
	pubSubStream   = "pubsub-drain"
	pubSubConsumer = "bench-1" // a pod's name
	pubSubPayload  = 100       // bytes a message, its index first
)

func pubSubDrainTable(messages int) *Table {
	return &Table{ID: "pubsub-drain", Title: "9. Pub/Sub: draining a stream",
		Setup: fmt.Sprintf("%d messages of %d bytes in one stream, read by a fresh consumer group through a Watermill Router "+
			"whose handler returns nil, until Redis has every one acked; per message", messages, pubSubPayload),
		Columns: []Column{{Key: "msgs_per_s", Header: "drain msgs/s", Digits: 0},
			{Key: "redis_cpu_us", Header: "Redis CPU µs", Digits: 2}, {Key: "round_trips", Header: "round trips", Digits: 3},
			{Key: "commands", Header: "commands", Digits: 3}, {Key: "client_cpu_us", Header: "client CPU µs", Digits: 1}},
		RatioOf: "msgs_per_s", RatioBase: pubSubContenders[0].name,
	}
}

// pubSub is comparison 9: the drain, then the idle cost.
func (b *bench) pubSub(ctx context.Context) error {
	if err := b.main.FlushAll(ctx).Err(); err != nil {
		return err
	}
	n := b.cfg.PubSubMessages
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = pubSubMessage(ctx, i)
	}
	start := time.Now()
	if err := b.publishMessages(pubSubStream, msgs...); err != nil {
		return err
	}
	b.progress("pubsub: %d messages published to %s in %.1f s", n, pubSubStream, time.Since(start).Seconds())
	t := b.addTable(pubSubDrainTable(n))
	err := interleave(b.cfg.Rounds, len(pubSubContenders), func(round, i int) error {
		return b.pubSubDrain(ctx, t, i, round)
	})
	if err != nil {
		return err
	}
	ours, theirs := pubSubContenders[0].name, pubSubContenders[1].name
	b.progress("pubsub-drain msgs/s, %s ÷ %s round by round: %s", ours, theirs, t.pairedRatios(ours, theirs, "msgs_per_s"))
	return b.pubSubIdle(ctx)
}

// pubSubMessage is message i: its payload begins with i, for the tally.
func pubSubMessage(ctx context.Context, i int) *message.Message {
	payload := fmt.Appendf(nil, "%08d ", i)
	msg := message.NewMessage(watermill.NewUUID(), append(payload, bytes.Repeat([]byte("x"), pubSubPayload-len(payload))...))
	msg.SetContext(ctx)
	return msg
}

// publishMessages publishes msgs to topic with watermill-redisstream's publisher (one XADD each).
func (b *bench) publishMessages(topic string, msgs ...*message.Message) error {
	pub, err := wmredisstream.NewPublisher(wmredisstream.PublisherConfig{Client: redis.NewClient(&redis.Options{Addr: b.mainAddr})}, nil)
	if err != nil {
		return err
	}
	defer pub.Close() // and its client
	return pub.Publish(topic, msgs...)
}

// pubSubDrain is one round of contender i: a fresh group reads the whole stream.
func (b *bench) pubSubDrain(ctx context.Context, t *Table, i, round int) error {
	c, n := pubSubContenders[i], b.cfg.PubSubMessages
	group := fmt.Sprintf("drain-%d-%d", round, i)
	tl := newTally(n)
	if err := b.main.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	looks := b.groupLooks.Load()
	r, err := b.newRouted(c, group, []string{pubSubStream}, tl)
	if err != nil {
		return err
	}
	var elapsed time.Duration
	cpu, err := b.measureCPU(ctx, []string{b.mainAddr}, []int{os.Getpid()}, func() error {
		start := time.Now()
		r.run(ctx)
		err := b.waitAcked(ctx, tl, group, []string{pubSubStream})
		elapsed = time.Since(start)
		return err
	})
	var stats redisStats
	if err == nil {
		stats, err = b.commandStats(ctx)
	}
	closing, closeErr := r.close()
	if err != nil {
		return fmt.Errorf("pubsub-drain %s: %w", c.name, err)
	}
	b.expectTally("pubsub-drain "+c.name, tl, round)
	b.checks.expect("pubsub-drain "+c.name+": the Router closes within 30 s", closeErr == nil, "round %d: %v", round+1, closeErr)
	reads, commands := stats.contenders(b.groupLooks.Load() - looks)
	v := map[string]float64{"msgs_per_s": float64(n) / elapsed.Seconds(), "redis_cpu_us": micros(cpu.redis) / float64(n),
		"round_trips": reads / float64(n), "commands": commands / float64(n), "client_cpu_us": micros(cpu.procs) / float64(n)}
	b.progress("pubsub-drain round %d/%d %-22s %7.0f msgs/s  Redis %5.2f µs  %5.3f round trips  %5.3f commands  client %5.1f µs  closed in %.2f s",
		round+1, b.cfg.Rounds, c.name, v["msgs_per_s"], v["redis_cpu_us"], v["round_trips"], v["commands"], v["client_cpu_us"], closing.Seconds())
	b.progress("pubsub-drain round %d/%d %-22s per message, calls × µs each: %s", round+1, b.cfg.Rounds, c.name, stats.topCommands(float64(n), 5))
	t.add(c.name, v)
	return b.main.XGroupDestroy(ctx, pubSubStream, group).Err()
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// contenders is what the contenders sent, the harness's own calls (INFO, CONFIG RESETSTAT, and its looks:
// XINFO GROUPS, which our Pub/Sub sends too) taken out: round trips (reads of client sockets) and commands.
func (s redisStats) contenders(looks int64) (reads, commands float64) {
	own := s.byCommand["info"].calls + float64(looks)
	return s.reads - own, s.commands - own - s.byCommand["config|resetstat"].calls
}

// waitAcked waits until the handler has seen every message, then until every stream's group has read its
// share of them and has none pending.
func (b *bench) waitAcked(ctx context.Context, tl *tally, group string, streams []string) error {
	timeout := time.NewTimer(3 * time.Minute)
	defer timeout.Stop()
	select {
	case <-tl.all:
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return fmt.Errorf("the handler saw %d of %d messages in 3 minutes; %s", tl.count.Load(), len(tl.seen),
			b.groupState(ctx, group, streams))
	}
	per := int64(len(tl.seen) / len(streams))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		done := true
		for _, stream := range streams {
			g, err := b.group(ctx, stream, group)
			if err != nil {
				return err
			}
			done = done && g.EntriesRead >= per && g.Pending == 0
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("the handler saw every message, but 30 s later %s", b.groupState(ctx, group, streams))
}

// group is the state of group on stream.
func (b *bench) group(ctx context.Context, stream, group string) (redis.XInfoGroup, error) {
	b.groupLooks.Add(1)
	groups, err := b.main.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return redis.XInfoGroup{}, err
	}
	for _, g := range groups {
		if g.Name == group {
			return g, nil
		}
	}
	return redis.XInfoGroup{}, fmt.Errorf("stream %s has no group %s", stream, group)
}

// groupState says, for an error, where group stands on each of streams.
func (b *bench) groupState(ctx context.Context, group string, streams []string) string {
	var pending, read int64
	for _, stream := range streams {
		g, err := b.group(ctx, stream, group)
		if err != nil {
			return err.Error()
		}
		pending, read = pending+g.Pending, read+g.EntriesRead
	}
	return fmt.Sprintf("group %s: %d entries read, %d pending", group, read, pending)
}

// tally counts the messages a handler saw, by the index their payload begins with.
type tally struct {
	seen  []atomic.Bool
	count atomic.Int64  // distinct messages seen
	extra atomic.Int64  // seen again, or not ours
	all   chan struct{} // closed once every message was seen
}

func newTally(n int) *tally { return &tally{seen: make([]atomic.Bool, n), all: make(chan struct{})} }

// handle is the handler: it tallies msg and returns nil.
func (t *tally) handle(msg *message.Message) error {
	index, _, _ := bytes.Cut(msg.Payload, []byte(" "))
	i, err := strconv.Atoi(string(index))
	if err != nil || i < 0 || i >= len(t.seen) || t.seen[i].Swap(true) {
		t.extra.Add(1)
		return nil
	}
	if t.count.Add(1) == int64(len(t.seen)) {
		close(t.all)
	}
	return nil
}

// expectTally checks that the handler saw every message once.
func (b *bench) expectTally(name string, tl *tally, round int) {
	ok := tl.count.Load() == int64(len(tl.seen)) && tl.extra.Load() == 0
	b.checks.expect(name+": every message handled once", ok, "round %d: %d of %d handled, %d again or unknown",
		round+1, tl.count.Load(), len(tl.seen), tl.extra.Load())
}

// routed is a contender at work: its client, its subscriber, a Router with a handler per topic.
type routed struct {
	client *redis.Client
	router *message.Router
	ran    chan error // Run's return
	logs   *mutableWriter
}

// newRouted builds the Router of contender c for topics, its handlers tallying in tl; run starts it.
func (b *bench) newRouted(c pubSubContender, group string, topics []string, tl *tally) (*routed, error) {
	client := redis.NewClient(&redis.Options{Addr: b.mainAddr})
	logs := &mutableWriter{w: cmp.Or[io.Writer](b.cfg.Progress, io.Discard)}
	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sub, err := c.subscriber(client, group, logger)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	for _, topic := range topics {
		router.AddConsumerHandler("tally-"+topic, topic, sub, tl.handle)
	}
	return &routed{client: client, router: router, ran: make(chan error, 1), logs: logs}, nil
}

func (r *routed) run(ctx context.Context) {
	go func() { r.ran <- r.router.Run(ctx) }()
}

// close closes the Router, which closes the subscriber, and says how long until Run returned: an error when
// it did not within 30 s. What the Pub/Sub logs from then on is not shown: watermill-redisstream logs an
// error for every read its Close cancels.
func (r *routed) close() (time.Duration, error) {
	r.logs.muted.Store(true)
	start := time.Now()
	err := r.router.Close()
	select {
	case runErr := <-r.ran:
		err = errors.Join(err, runErr)
	case <-time.After(30 * time.Second):
		err = errors.Join(err, errors.New("Router.Run did not return within 30 s of Close"))
	}
	_ = r.client.Close() // watermill-redisstream's subscriber closed it already
	return time.Since(start), err
}

// mutableWriter writes to w until muted.
type mutableWriter struct {
	w     io.Writer
	muted atomic.Bool
}

func (m *mutableWriter) Write(p []byte) (int, error) {
	if m.muted.Load() {
		return len(p), nil
	}
	return m.w.Write(p)
}
