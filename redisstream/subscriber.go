package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Defaults of SubscriberConfig's zero values.
const (
	// NoSleep, as NackResendSleep, hands a nacked message out again at once.
	NoSleep time.Duration = -1
	// DefaultBlockTime is 1 s: how long one fan-out read waits for new entries, hence also how long Close may wait
	// for a subscription's read to return.
	DefaultBlockTime = time.Second
	// DefaultClaimInterval is 5 s.
	DefaultClaimInterval = 5 * time.Second
	// DefaultClaimBatchSize is 100 entries a claim.
	DefaultClaimBatchSize = int64(100)
	// DefaultMaxIdleTime is 60 s: an entry pending that long is taken for its consumer's (dead) and claimed.
	DefaultMaxIdleTime = 60 * time.Second
	// DefaultCheckConsumersInterval is 300 s.
	DefaultCheckConsumersInterval = 300 * time.Second
	// DefaultConsumerTimeout is 600 s.
	DefaultConsumerTimeout = 600 * time.Second
	// DefaultReadBatchSize is 100 entries a read.
	DefaultReadBatchSize = int64(100)
	// DefaultMaxInFlight is 1,000 messages handed out and not yet acked, per subscription.
	DefaultMaxInFlight = 1000
	// DefaultMaxEntryBytes is 1 MiB.
	DefaultMaxEntryBytes = 1 << 20
	// DefaultPoisonMaxLen is 10,000 entries.
	DefaultPoisonMaxLen = 10000
)

// SubscriberConfig configures a Subscriber; only Client is required. The names it shares with
// watermill-redisstream mean the same.
type SubscriberConfig struct {
	Client redis.UniversalClient
	// Unmarshaller reads an entry that has Watermill's fields; nil means DefaultMarshallerUnmarshaller.
	Unmarshaller Unmarshaller
	// Consumer is this subscriber's name in ConsumerGroup; empty means a new random one. Keep it across
	// restarts (a pod's name) and a restarted subscriber reads what it left pending at once.
	Consumer string
	// ConsumerGroup: the subscribers of one group share a topic's entries. Empty means fan-out: every
	// subscriber reads every entry from FanOutOldestId on, and Ack touches no Redis state.
	ConsumerGroup string
	// NackResendSleep is how long a nacked message waits before it is handed out again; 0 or NoSleep: at once.
	NackResendSleep time.Duration
	// BlockTime is how long one fan-out read (no ConsumerGroup) waits for new entries; 0 means
	// DefaultBlockTime. A group's reads do not block: an idle one polls, 10 ms doubling to 100 ms.
	BlockTime time.Duration
	// ClaimInterval is how often idle pending entries are claimed; 0 means DefaultClaimInterval.
	ClaimInterval time.Duration
	// ClaimBatchSize is kept for watermill-redisstream's configs; a claim takes up to ReadBatchSize entries.
	ClaimBatchSize int64
	// MaxIdleTime is how long an entry must have been pending before it is claimed; 0 means
	// DefaultMaxIdleTime. Make it longer than a message's longest handling.
	MaxIdleTime time.Duration
	// CheckConsumersInterval is how often consumers idle past ConsumerTimeout with nothing pending are
	// deleted from the group; 0 means DefaultCheckConsumersInterval.
	CheckConsumersInterval time.Duration
	// ConsumerTimeout; 0 means DefaultConsumerTimeout.
	ConsumerTimeout time.Duration
	// OldestId is where a group created by Subscribe starts: "0" (the default) from the oldest entry, "$"
	// from the next new one.
	OldestId string
	// FanOutOldestId is where a fan-out subscription starts; empty means "$", the next new entry.
	FanOutOldestId string
	// ShouldClaimPendingMessage, if set, is asked about each entry pending longer than MaxIdleTime before
	// it is claimed: false leaves it with its consumer (which another health check knows to be alive). A
	// claim then lists the idle entries first (XPENDING): one round trip more a claim round.
	ShouldClaimPendingMessage func(redis.XPendingExt) bool
	// ShouldStopOnReadErrors, if set, is asked about each read that failed: true ends the subscription (its
	// channel closes; what the same pipeline read from the topic's other partitions stays pending to the
	// consumer until a claim). Otherwise the stream is read again after a pause (a group's: 100 ms doubling
	// to 5 s, while its other partitions are read; a fan-out's: 50 ms doubling to 2 s).
	ShouldStopOnReadErrors func(error) bool
	// DisableIndefiniteInitialBlock is kept for watermill-redisstream's configs: no read here blocks
	// longer than BlockTime, the first one included.
	DisableIndefiniteInitialBlock bool

	// ReadBatchSize bounds the entries one read takes; 0 means DefaultReadBatchSize.
	ReadBatchSize int64
	// MaxInFlight bounds the messages of one subscription handed out and not yet acked; 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// Partitions: with N >= 1, Subscribe(ctx, topic) reads the N streams PartitionTopic(topic, 0..N-1) (1: one
	// stream with a hash tag, as a Redis Cluster wants); 0 means the stream named topic alone.
	Partitions int
	// MaxEntryBytes bounds the entries handed out (field names and values); a larger one is moved, inside
	// Redis, to a poison stream and acked, so that no subscriber ever holds it. 0 means DefaultMaxEntryBytes.
	MaxEntryBytes int
	// PoisonTopic is where a group's entries over MaxEntryBytes go, partitioned as the topic is (partition i's
	// to PartitionTopic(PoisonTopic, i)); empty means each stream's own, PoisonTopicOf(stream).
	PoisonTopic string
	// PoisonMaxLen is the approximate length bound of the poison streams; 0 means DefaultPoisonMaxLen.
	PoisonMaxLen int
	// KeyspaceEvents says how an idle group subscription learns of new entries: by polling (Off, the
	// default), or by waiting for Redis's keyspace event of an XADD (On: notify-keyspace-events has K and t;
	// Auto: the subscriber turns them on with CONFIG SET, and polls where Redis refuses).
	KeyspaceEvents KeyspaceEvents
	// HandlingContext, if set, is the parent of the messages' contexts instead of Subscribe's ctx: a message
	// being handled when its subscription ends (a Router closes its subscribers first on Close) keeps its
	// context until HandlingContext ends, so that a graceful shutdown lets handlers finish.
	HandlingContext context.Context
	// RecreateFrom says where a group found missing while subscribed (Redis restarted without its data) is
	// created again; nil means OldestId.
	RecreateFrom func(now time.Time) string

	// Leaving Watermill's contract, for a handler built for it (the stockflow worker's):
	//   - SharedContext: the messages share one context, HandlingContext's or the subscription's, which does
	//     not end at Ack or Nack (a context per message costs ~4 % of a busy worker's CPU);
	//   - NackLeavesPending: a nacked message is not handed out again; its entry stays pending in Redis
	//     until a claim (MaxIdleTime), for a handler that hands a failed attempt back to the group itself;
	//   - ReleasedByHandler: the handler frees each message's place in flight itself, calling Release just
	//     before it returns (ReleaseMiddleware, the handler's outermost middleware, does), instead of the subscriber awaiting the Ack or Nack in a goroutine per message
	//     (half the goroutines a message costs). A handler that does not stalls the subscription once
	//     MaxInFlight messages are out. Implies SharedContext and NackLeavesPending.
	SharedContext, NackLeavesPending, ReleasedByHandler bool
}

// KeyspaceEvents is how an idle group subscription learns of new entries (SubscriberConfig.KeyspaceEvents).
type KeyspaceEvents int

// The values of KeyspaceEvents.
const (
	// KeyspaceEventsOff: an idle subscription polls: it reads every 10 ms doubling to 100 ms, then the
	// Subscriber looks at all its idle subscriptions' streams in one pipeline every 100 ms (XINFO GROUPS).
	KeyspaceEventsOff KeyspaceEvents = iota
	// KeyspaceEventsOn: Redis publishes keyspace events of streams (notify-keyspace-events has K and t, or K
	// and A): it waits for one.
	KeyspaceEventsOn
	// KeyspaceEventsAuto: it turns the events on (CONFIG GET and SET) and waits for one; when Redis refuses,
	// it polls. When its read of every partition every idlePoll finds entries, whose events may never have
	// come, it checks that Redis still publishes them, and turns them on again when they were turned off
	// meanwhile (CONFIG SET notify-keyspace-events "").
	KeyspaceEventsAuto
)

func (c *SubscriberConfig) setDefaults() {
	if c.Unmarshaller == nil {
		c.Unmarshaller = DefaultMarshallerUnmarshaller{}
	}
	if c.Consumer == "" {
		c.Consumer = watermill.NewShortUUID()
	}
	c.BlockTime = cmp.Or(c.BlockTime, DefaultBlockTime)
	c.ClaimInterval = cmp.Or(c.ClaimInterval, DefaultClaimInterval)
	c.ClaimBatchSize = cmp.Or(c.ClaimBatchSize, DefaultClaimBatchSize)
	c.MaxIdleTime = cmp.Or(c.MaxIdleTime, DefaultMaxIdleTime)
	c.CheckConsumersInterval = cmp.Or(c.CheckConsumersInterval, DefaultCheckConsumersInterval)
	c.ConsumerTimeout = cmp.Or(c.ConsumerTimeout, DefaultConsumerTimeout)
	c.OldestId = cmp.Or(c.OldestId, "0")
	c.FanOutOldestId = cmp.Or(c.FanOutOldestId, "$")
	c.ReadBatchSize = cmp.Or(c.ReadBatchSize, DefaultReadBatchSize)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.MaxEntryBytes = cmp.Or(c.MaxEntryBytes, DefaultMaxEntryBytes)
	c.PoisonMaxLen = cmp.Or(c.PoisonMaxLen, DefaultPoisonMaxLen)
}

// Validate reports every setting that cannot work.
func (c SubscriberConfig) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("redisstream: SubscriberConfig."+format, args...))
		}
	}
	check(c.Client != nil, "Client is nil")
	check(c.NackResendSleep >= NoSleep, "NackResendSleep %s is negative", c.NackResendSleep)
	for name, d := range map[string]time.Duration{"BlockTime": c.BlockTime, "ClaimInterval": c.ClaimInterval,
		"MaxIdleTime": c.MaxIdleTime, "CheckConsumersInterval": c.CheckConsumersInterval,
		"ConsumerTimeout": c.ConsumerTimeout} {
		check(d >= 0, "%s %s is negative", name, d)
	}
	check(c.BlockTime == 0 || c.BlockTime >= time.Millisecond, "BlockTime %s is under Redis's 1 ms resolution", c.BlockTime)
	check(c.ClaimBatchSize >= 0, "ClaimBatchSize %d is negative", c.ClaimBatchSize)
	check(c.ReadBatchSize >= 0, "ReadBatchSize %d is negative", c.ReadBatchSize)
	check(c.MaxInFlight >= 0, "MaxInFlight %d is negative", c.MaxInFlight)
	check(c.Partitions >= 0, "Partitions %d is negative", c.Partitions)
	check(c.MaxEntryBytes >= 0, "MaxEntryBytes %d is negative", c.MaxEntryBytes)
	check(c.PoisonMaxLen >= 0, "PoisonMaxLen %d is negative", c.PoisonMaxLen)
	check(c.KeyspaceEvents >= KeyspaceEventsOff && c.KeyspaceEvents <= KeyspaceEventsAuto, "KeyspaceEvents %d is unknown", c.KeyspaceEvents)
	check(!strings.ContainsAny(c.Consumer, " \r\n"), "Consumer %q has a space or a line break", c.Consumer)
	return errors.Join(errs...)
}

// PartitionTopic is the stream of a topic's partition i: "<topic>:{i}", so that on a Redis Cluster a
// partition's keys hash by {i} alone.
func PartitionTopic(topic string, i int) string { return fmt.Sprintf("%s:{%d}", topic, i) }

// PoisonTopicOf is the stream where a consumer group's oversized entries of stream go: "<stream>:poison" when
// stream has a hash tag (a partition's), else "{<stream>}:poison", so that on a Redis Cluster both hash
// to one slot.
func PoisonTopicOf(stream string) string {
	if open := strings.IndexByte(stream, '{'); open >= 0 {
		if end := strings.IndexByte(stream[open:], '}'); end > 1 {
			return stream + ":poison"
		}
	}
	return "{" + stream + "}:poison"
}

// Subscriber reads topics of Redis Streams as Watermill messages, in a consumer group or fanned out. A
// group's subscription is the worker's own reader (reader.go, read.go: batched fetch.lua reads
// and claims over the partitions in one pipeline, delivery counts, oversized entries kept out of the
// process, lost replies made good), kept to Watermill's contract: a context per message, a nacked message
// sent again.
type Subscriber struct {
	config SubscriberConfig
	logger watermill.LoggerAdapter
	slog   *slog.Logger

	closing chan struct{}
	subs    sync.WaitGroup // the subscriptions running

	mu     sync.Mutex
	closed bool
	groups []*groupSub          // every group subscription, in the order of Subscribe
	first  map[string]*groupSub // the first group subscription of each stream (Release, Owns)
	live   map[string]int       // the group subscriptions reading each stream, until their ctx ends
	// only is the one group subscription's reader while there is one (Release without a lock).
	only atomic.Pointer[reader]
	// peeker looks for entries for every idle group subscription that polls, in one pipeline.
	peeker *peeker
}

// groupSub is one Subscribe in a consumer group: its reader, and what the Subscriber's methods ask of it.
type groupSub struct {
	reader  *reader
	index   map[string]int // its streams, by index among the topic's partitions
	failing atomic.Int64   // when its reads started failing (unix ns), 0 while they succeed
	ended   atomic.Bool    // its ctx ended
}

// NewSubscriber returns a Subscriber; logger may be nil. A logger that has a method Slog() *slog.Logger
// gets the group subscriptions' records there, with their levels (Watermill has no warning level).
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	config.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	log := slog.New(logHandler{logger: logger})
	if l, ok := logger.(interface{ Slog() *slog.Logger }); ok {
		log = l.Slog()
	}
	return &Subscriber{config: config, logger: logger, slog: log, closing: make(chan struct{}),
		first: map[string]*groupSub{}, live: map[string]int{}, peeker: newPeeker(config.Client)}, nil
}

// Subscribe reads topic (its partitions, with Partitions >= 1) until ctx ends or the Subscriber closes; the
// channel is closed then. With a ConsumerGroup, the group is created where it does not exist yet, at
// OldestId, and the first subscription of a stream hands out at once what the consumer left pending on it.
// With ReleasedByHandler a stream can be subscribed once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	streams := s.streams(topic)
	if s.config.ConsumerGroup == "" {
		return s.fanOut(ctx, topic, streams)
	}
	fresh, err := s.join(streams)
	if err != nil {
		return nil, err
	}
	gs, out, err := s.subscribeGroup(ctx, topic, streams, fresh)
	if err != nil {
		s.leave(streams)
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			gs.ended.Store(true)
			s.leave(streams)
		case <-s.closing:
		}
	}()
	return out, nil
}

// join counts a subscription of streams in; fresh lists those no other subscription reads.
func (s *Subscriber) join(streams []string) (fresh []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	for _, name := range streams {
		if s.config.ReleasedByHandler && s.first[name] != nil {
			return nil, fmt.Errorf("redisstream: %s is subscribed already: with ReleasedByHandler a stream is subscribed once", name)
		}
	}
	for _, name := range streams {
		if s.live[name] == 0 {
			fresh = append(fresh, name)
		}
		s.live[name]++
	}
	return fresh, nil
}

// leave counts a subscription of streams out.
func (s *Subscriber) leave(streams []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range streams {
		s.live[name]--
	}
}

// subscribeGroup creates the groups of streams where missing, reclaims the consumer's own pending entries
// of the fresh ones, and starts a reader.
func (s *Subscriber) subscribeGroup(ctx context.Context, topic string, streams, fresh []string) (*groupSub, <-chan *message.Message, error) {
	for _, name := range streams {
		if err := s.createGroup(ctx, name); err != nil {
			return nil, nil, err
		}
	}
	for _, name := range fresh {
		if err := s.reclaimOwn(ctx, name); err != nil {
			return nil, nil, err
		}
	}
	gs := &groupSub{index: make(map[string]int, len(streams))}
	reader, err := newReader(s.config.Client, s.configFor(topic, streams, &gs.failing))
	if err != nil {
		return nil, nil, err
	}
	gs.reader = reader
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	out, err := reader.Subscribe(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	s.groups = append(s.groups, gs)
	for i, name := range streams {
		gs.index[name] = i
		if s.first[name] == nil {
			s.first[name] = gs
		}
	}
	if len(s.groups) == 1 {
		s.only.Store(reader)
	} else {
		s.only.Store(nil)
	}
	return gs, out, nil
}

// configFor is the group reader's config for topic's streams.
func (s *Subscriber) configFor(topic string, streams []string, failing *atomic.Int64) readerConfig {
	c := s.config
	parts := make([]partition, len(streams))
	for i, name := range streams {
		parts[i] = partition{Index: i, Orders: name, Poison: PoisonTopicOf(name), Partitioned: c.Partitions > 0}
		if c.PoisonTopic != "" {
			parts[i].Poison = c.PoisonTopic
			if c.Partitions > 0 {
				parts[i].Poison = PartitionTopic(c.PoisonTopic, i)
			}
		}
	}
	var u Unmarshaller
	if _, builtIn := c.Unmarshaller.(DefaultMarshallerUnmarshaller); !builtIn {
		u = c.Unmarshaller
	}
	recreateFrom := c.RecreateFrom
	if recreateFrom == nil {
		recreateFrom = func(time.Time) string { return c.OldestId }
	}
	contract := !c.ReleasedByHandler
	return readerConfig{Partitions: parts, Group: c.ConsumerGroup, Consumer: c.Consumer,
		MaxInFlight: c.MaxInFlight, ReadCount: int(c.ReadBatchSize), PoisonMaxLen: c.PoisonMaxLen,
		MaxEntryBytes: c.MaxEntryBytes, Events: c.KeyspaceEvents, ClaimIdle: c.MaxIdleTime,
		ClaimInterval: c.ClaimInterval, PruneInterval: c.CheckConsumersInterval, ConsumerTimeout: c.ConsumerTimeout,
		Logger: s.slog.With("topic", topic), Failing: failing, ReplayFrom: recreateFrom, Handling: c.HandlingContext,
		Released: c.ReleasedByHandler, MessageContexts: contract && !c.SharedContext,
		ResendNacked: contract && !c.NackLeavesPending, ResendPause: max(c.NackResendSleep, 0), RoomLinger: roomLinger(contract),
		Unmarshaller: u, ShouldClaim: c.ShouldClaimPendingMessage, StopOnReadError: c.ShouldStopOnReadErrors,
		Peeker: s.peeker}
}

// FlushAcks waits until the acks given so far are sent to Redis, or ctx ends: Close does, and a caller
// whose messages were handled after Close (HandlingContext) does again before it gives their entries back.
func (s *Subscriber) FlushAcks(ctx context.Context) error {
	s.mu.Lock()
	groups := slices.Clone(s.groups)
	s.mu.Unlock()
	for _, gs := range groups {
		if err := gs.reader.FlushAcks(ctx); err != nil {
			return fmt.Errorf("redisstream: acks not sent: %w", err)
		}
	}
	return nil
}

// FailingSince is since when the reads of a group subscription (the earliest) have been failing (Redis, or
// a cluster node, does not answer); zero while they all succeed.
func (s *Subscriber) FailingSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var since time.Time
	for _, gs := range s.groups {
		if ns := gs.failing.Load(); ns != 0 && !gs.ended.Load() {
			if t := time.Unix(0, ns); since.IsZero() || t.Before(since) {
				since = t
			}
		}
	}
	return since
}

// Owns reports whether this consumer is one of the 2 owners of stream among the group's live consumers
// (rendezvous hashing), with KeyspaceEvents on or auto: they take its keyspace events and claim its idle
// entries. Work that one or two consumers of a group must do for all can go to the owners of a stream. True
// without keyspace events, and for a stream not subscribed.
func (s *Subscriber) Owns(stream string) bool {
	s.mu.Lock()
	gs := s.first[stream]
	s.mu.Unlock()
	return gs == nil || gs.reader.Owns(gs.index[stream])
}

// roomLinger is how long a group's read waits, under Watermill's contract, for half of MaxInFlight to be
// free once one place is: reads stay large under load, and a handler that holds many messages does not stall
// the others for long. A handler that releases its places itself (the worker) waits for half.
func roomLinger(contract bool) time.Duration {
	if contract {
		return 2 * time.Millisecond
	}
	return 0
}

// reclaimOwn marks the entries this consumer left pending on stream name (it restarted under the same
// name, or an earlier subscription of this Subscriber ended) idle for MaxIdleTime, so that the reader's
// first claim, at once, hands them out again rather than one after MaxIdleTime (XCLAIM ... IDLE JUSTID,
// which counts no delivery: the claim does). Entries still in a handler of an ended subscription are left
// alone: their ack is still sent (lateVerdict), and handing them out again would run them twice at once;
// those acked already are acked in Redis first (settleEnded).
func (s *Subscriber) reclaimOwn(ctx context.Context, name string) error {
	const page = 1000
	held, err := s.settleEnded(ctx, name)
	if err != nil {
		return err
	}
	for start := "-"; ; {
		pending, err := s.config.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: name,
			Group: s.config.ConsumerGroup, Start: start, End: "+", Count: page, Consumer: s.config.Consumer}).Result()
		if err != nil || len(pending) == 0 {
			return wrapErr("look at the pending entries of "+name, err)
		}
		left := slices.DeleteFunc(slices.Clone(pending), func(p redis.XPendingExt) bool { return held[p.ID] })
		if len(left) > 0 {
			args := []any{"XCLAIM", name, s.config.ConsumerGroup, s.config.Consumer, 0}
			for _, p := range left {
				args = append(args, p.ID)
			}
			args = append(args, "IDLE", s.config.MaxIdleTime.Milliseconds(), "JUSTID")
			claimed, err := s.config.Client.Do(ctx, args...).StringSlice()
			if err != nil {
				return wrapErr("reclaim the pending entries of "+name, err)
			}
			s.noteDeleted(ctx, name, left, claimed)
		}
		if len(pending) < page {
			return nil
		}
		start = "(" + pending[len(pending)-1].ID
	}
}

// settleEnded waits until the readers of the ended subscriptions of stream name send nothing more, sends
// the acks their handlers gave so far, and returns the ids of name's entries still out in those handlers.
func (s *Subscriber) settleEnded(ctx context.Context, name string) (held map[string]bool, err error) {
	s.mu.Lock()
	var readers []*reader
	for _, gs := range s.groups {
		if _, ok := gs.index[name]; ok { // ended: name is subscribed afresh
			readers = append(readers, gs.reader)
		}
	}
	s.mu.Unlock()
	held = map[string]bool{}
	for _, r := range readers {
		select {
		case <-r.sendsEnded:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		r.held(name, held) // before the flush: an ack given after it is in held, one given before is flushed
		if err := r.FlushAcks(ctx); err != nil {
			return nil, fmt.Errorf("redisstream: acks not sent: %w", err)
		}
	}
	return held, nil
}

// noteDeleted logs and counts the pending entries an XCLAIM did not return: their entries were deleted from
// the stream (trimmed) while pending, and Redis 7 drops them from the pending list, as the reader's claims
// report them.
func (s *Subscriber) noteDeleted(ctx context.Context, name string, pending []redis.XPendingExt, claimed []string) {
	if len(claimed) == len(pending) {
		return
	}
	var gone []string
	for _, p := range pending {
		if !slices.Contains(claimed, p.ID) {
			gone = append(gone, p.ID)
		}
	}
	s.slog.Error("entries were deleted from the stream before they were decided: their orders are lost",
		"stream", name, "ids", gone)
	deletedEntries.Add(ctx, int64(len(gone)))
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redisstream: %s: %w", what, err)
}

// fanOut subscribes without a group: every subscriber reads every entry.
func (s *Subscriber) fanOut(ctx context.Context, topic string, streams []string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.subs.Add(1)
	sub := newSubscription(ctx, s, topic)
	for i, name := range streams {
		sub.start(partition{Index: i, Orders: name, Partitioned: s.config.Partitions > 0})
	}
	go func() {
		sub.wait()
		s.subs.Done()
	}()
	return sub.out, nil
}

// SubscribeInitialize creates topic's consumer group (Watermill's message.SubscribeInitializer).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.config.ConsumerGroup == "" {
		return nil
	}
	for _, name := range s.streams(topic) {
		if err := s.createGroup(context.Background(), name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Subscriber) streams(topic string) []string {
	if s.config.Partitions == 0 {
		return []string{topic}
	}
	streams := make([]string, s.config.Partitions)
	for i := range streams {
		streams[i] = PartitionTopic(topic, i)
	}
	return streams
}

func (s *Subscriber) createGroup(ctx context.Context, name string) error {
	err := s.config.Client.XGroupCreateMkStream(ctx, name, s.config.ConsumerGroup, s.config.OldestId).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %s of %s: %w", s.config.ConsumerGroup, name, err)
	}
	return nil
}

// Close ends every subscription, waits for their channels to close, and sends the acks already given.
// Messages handed out and not acked stay pending: a claim hands them out again; but the acks such a message
// gets after Close (Watermill's Router closes its subscribers before it waits for the handlers still
// running) are still sent as they come, for up to 30 s (the Router's default CloseTimeout; an ack that comes
// later leaves its entry pending, to be claimed and handled again), while Client is open: FlushAcks waits
// for those given so far. It does not close Client.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	groups := slices.Clone(s.groups)
	s.mu.Unlock()
	for _, gs := range groups {
		_ = gs.reader.Close()
	}
	s.subs.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.FlushAcks(ctx)
}
