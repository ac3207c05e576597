package stream

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Defaults of SubscriberConfig.
const (
	// DefaultClaimInterval is how often a subscriber looks for idle entries to claim: 1 s.
	DefaultClaimInterval = time.Second
	// DefaultPruneInterval is how often a subscriber looks for consumers of the group to delete: 5 min.
	DefaultPruneInterval = 5 * time.Minute
	// DefaultConsumerTimeout is how long a consumer with nothing pending must have been idle before it is
	// deleted from the group: 10 min.
	DefaultConsumerTimeout = 10 * time.Minute
	// DefaultNackPause is how long a subscriber waits after a Nack before it sends the next message: 500 ms.
	DefaultNackPause = 500 * time.Millisecond
)

// SubscriberConfig is what a Subscriber needs; a worker's subscribers share all of it but Consumer and
// First.
type SubscriberConfig struct {
	// Partitions are the streams read: every partition of the orders (Config.Partitions).
	Partitions []Partition
	Group      string // the consumer group; it exists before Subscribe (see ReplayFrom when it is lost)
	Consumer   string // the subscriber's name in the group
	// First is the partition read first. A worker's consumer i starts at partition i, so that its
	// consumers do not all start at the same one.
	First        int
	PoisonMaxLen int // approximate bound of the poison streams (oversized entries go there)
	// ClaimIdle is how long an entry must have been pending, untouched, before the subscriber claims it:
	// its consumer died, or handed a failed attempt back. Required.
	ClaimIdle time.Duration
	// ClaimInterval is how often the subscriber looks for idle entries, one partition per look, in turn
	// from a random one; 0 means DefaultClaimInterval.
	ClaimInterval time.Duration
	// PruneInterval is how often the subscriber looks for consumers to delete, one partition per look, in
	// turn from a random one; 0 means DefaultPruneInterval.
	PruneInterval time.Duration
	// ConsumerTimeout: a consumer idle longer than this with nothing pending is deleted from the group
	// (Group.PruneConsumer); 0 means DefaultConsumerTimeout.
	ConsumerTimeout time.Duration
	// NackPause is how long the subscriber waits after a Nack before it sends the next message; 0 means
	// DefaultNackPause.
	NackPause time.Duration
	Logger    *slog.Logger // nil: slog.Default()
	// Failing is when reads started failing (unix ns), 0 while they succeed; a worker's subscribers share
	// it. nil: not recorded.
	Failing *atomic.Int64
	// ReplayFrom is where a lost group is created again: the first entry whose outcome record may still
	// exist (see the worker's OUTCOME_TTL). Required.
	ReplayFrom func(time.Time) string
}

func (c *SubscriberConfig) setDefaults() {
	if c.ClaimInterval == 0 {
		c.ClaimInterval = DefaultClaimInterval
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = DefaultPruneInterval
	}
	if c.ConsumerTimeout == 0 {
		c.ConsumerTimeout = DefaultConsumerTimeout
	}
	if c.NackPause == 0 {
		c.NackPause = DefaultNackPause
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Failing == nil {
		c.Failing = new(atomic.Int64)
	}
}

// Validate reports every setting of c that cannot work.
func (c SubscriberConfig) Validate() error {
	var errs []error
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New("stream: subscriber: "+msg))
		}
	}
	check(len(c.Partitions) > 0, "no partitions")
	check(c.Group != "", "no consumer group")
	check(c.Consumer != "", "no consumer name")
	check(c.First >= 0, "First is negative")
	check(c.ClaimIdle > 0, "ClaimIdle is not positive")
	check(c.ReplayFrom != nil, "no ReplayFrom")
	return errors.Join(errs...)
}

// Subscriber is one consumer of the orders' consumer group: a Watermill message.Subscriber that feeds a
// Router one message at a time.
//
//   - Subscribe's topic stands for every partition of the orders (SubscriberConfig.Partitions). Each read
//     takes the next entry of the first partition that has one, starting after the partition read last.
//     A partition whose reads fail (its cluster node is down) is skipped for a while, 100 ms doubling to
//     5 s, while the others are read; a read fails only when every partition tried failed, and
//     SubscriberConfig.Failing says since when some partition fails.
//   - Entries are read and claimed by fetch.lua, which poisons oversized entries (MaxEntryBytes) inside
//     Redis, so a worker never holds one, and returns each entry's delivery count (Deliveries). The price
//     is polling: an idle subscriber reads every 10-100 ms.
//   - A message's UUID is its entry id, stable across redeliveries; EntryPartition says where it came
//     from; its metadata and trace context are the entry's (Entry.Message). An entry that cannot be read
//     is marked with MetaBadEntry, for the poison stream.
//   - While the handler has a message, the subscriber reads up to two more (readAhead), so the next is at
//     hand when the handler is done. The entries read ahead are pending for this consumer: the worker
//     hands them back when it stops.
//   - Every ClaimInterval it claims the entries of one partition (in turn) that have been idle longer than
//     ClaimIdle: those of dead consumers, and failed attempts handed back. It claims them one at a time, as
//     it reads, so a claimed entry waits behind no more than the two read ahead.
//   - Every PruneInterval it deletes, on one partition in turn, the consumers idle longer than
//     ConsumerTimeout with nothing pending (Group.PruneConsumer).
//   - A missing consumer group (Redis restarted without its data, the stream deleted) is created again,
//     from ReplayFrom.
//
// Ack and Nack do not touch Redis: the worker acks an entry itself, in the transaction that records its
// outcome (or poisons it), and hands a failed attempt back itself. Ack means "done: send the next". Nack
// leaves the entry pending in Redis, where it is claimed again once idle for ClaimIdle (by any consumer,
// this one too), and the subscriber sends the next message after NackPause; it never sends a nacked
// message again.
//
// A message's context ends when it is acked or nacked, or when the subscription ends. Close ends the
// subscription and waits for its goroutines; it does not wait for a message being handled, and does not
// close the Redis client, which the subscribers share.
type Subscriber struct {
	rdb redis.UniversalClient
	cfg SubscriberConfig

	mu         sync.Mutex
	subscribed bool
	closed     bool
	cancel     context.CancelFunc // ends the subscription; nil before Subscribe
	running    sync.WaitGroup

	// The read loop's state; only the read loop (readLoop) touches it.
	next    int           // the partition the next read starts at
	pause   time.Duration // the current pause after an empty read
	failed  []failure     // by partition: how long its reads are skipped after a failure, and until when
	failing int           // partitions in failed with a pause
	claims  claims
}

var _ message.Subscriber = (*Subscriber)(nil)

// ErrSubscriberClosed: Subscribe after Close.
var ErrSubscriberClosed = errors.New("stream: subscriber closed")

// errSubscribed: a second Subscribe; a Subscriber is one consumer, with one subscription.
var errSubscribed = errors.New("stream: subscriber subscribed already")

// NewSubscriber returns a subscriber that reads with rdb, which it never closes.
func NewSubscriber(rdb redis.UniversalClient, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Partitions)
	return &Subscriber{rdb: rdb, cfg: cfg, next: cfg.First % n, failed: make([]failure, n),
		claims: claims{next: rand.IntN(n)}}, nil
}

// Subscribe starts reading; topic is a name for the orders, whose partitions the config lists. The
// channel is closed when the subscription ends: ctx is done or Close was called.
func (s *Subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrSubscriberClosed
	case s.subscribed:
		return nil, errSubscribed
	}
	s.subscribed = true
	ctx, s.cancel = context.WithCancel(ctx)
	ahead := make(chan *message.Message, readAhead)
	out := make(chan *message.Message)
	s.running.Add(3)
	go func() {
		defer s.running.Done()
		defer close(ahead)
		s.readLoop(ctx, ahead)
	}()
	go func() {
		defer s.running.Done()
		defer s.cancel() // the other loops end with this one (ctx ended)
		defer close(out)
		s.sendLoop(ctx, ahead, out)
	}()
	go func() {
		defer s.running.Done()
		s.prune(ctx)
	}()
	return out, nil
}

// Close ends the subscription and waits for its goroutines.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.running.Wait()
	return nil
}

// readAhead is how many messages the read loop keeps ready besides the one it holds: while the handler
// has one message, up to two more are read (pending for this consumer), so the next is at hand when the
// handler is done, as with Watermill's redisstream subscriber.
const readAhead = 1

// readLoop claims and reads the subscriber's entries and hands them on to ahead, until ctx ends.
func (s *Subscriber) readLoop(ctx context.Context, ahead chan<- *message.Message) {
	for ctx.Err() == nil {
		var err error
		msgs := s.claim(ctx)
		if len(msgs) == 0 {
			msgs, err = s.read(ctx)
		}
		if err != nil {
			pauseFor(ctx, readErrorPause)
			continue
		}
		for _, msg := range msgs {
			select {
			case ahead <- msg:
			case <-ctx.Done():
				return
			}
		}
	}
}

// sendLoop sends the messages of ahead to out, one at a time, until ctx ends.
func (s *Subscriber) sendLoop(ctx context.Context, ahead <-chan *message.Message, out chan<- *message.Message) {
	for msg := range ahead {
		if ctx.Err() != nil || !s.send(ctx, out, msg) {
			return
		}
	}
}

// send hands msg to out and waits for its Ack or Nack; it reports false when ctx ended first.
func (s *Subscriber) send(ctx context.Context, out chan<- *message.Message, msg *message.Message) bool {
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)
	select {
	case out <- msg:
	case <-ctx.Done():
		return false
	}
	select {
	case <-msg.Acked():
		return true
	case <-msg.Nacked():
		// The entry stays pending; a claim brings it back. The pause keeps a failing handler (Redis
		// refusing the poison stream, say) from racing through the stream.
		return pauseFor(ctx, s.cfg.NackPause)
	case <-ctx.Done():
		return false
	}
}

// pauseFor waits d; it reports false when ctx ended first.
func pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
