package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Defaults of SubscriberConfig's zero values.
const (
	// NoSleep, as NackResendSleep, hands a nacked message out again at once.
	NoSleep time.Duration = -1
	// DefaultBlockTime is 1 s: how long one read waits for new entries, hence also how long Close may wait
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
	// BlockTime is how long one read waits for new entries; 0 means DefaultBlockTime.
	BlockTime time.Duration
	// ClaimInterval is how often idle pending entries are claimed; 0 means DefaultClaimInterval.
	ClaimInterval time.Duration
	// ClaimBatchSize bounds the entries one claim takes; 0 means DefaultClaimBatchSize.
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

	// ReadBatchSize bounds the entries one read takes; 0 means DefaultReadBatchSize.
	ReadBatchSize int64
	// MaxInFlight bounds the messages of one subscription handed out and not yet acked; 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// Partitions: with N > 1, Subscribe(ctx, topic) reads the N streams PartitionTopic(topic, 0..N-1); 0 or 1
	// means the stream named topic alone.
	Partitions int
}

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
	c.Partitions = max(c.Partitions, 1)
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
	check(!strings.ContainsAny(c.Consumer, " \r\n"), "Consumer %q has a space or a line break", c.Consumer)
	return errors.Join(errs...)
}

// PartitionTopic is the stream of a topic's partition i: "<topic>:{i}", so that on a Redis Cluster a
// partition's keys hash by {i} alone.
func PartitionTopic(topic string, i int) string { return fmt.Sprintf("%s:{%d}", topic, i) }

// Subscriber reads topics of Redis Streams as Watermill messages, in a consumer group or fanned out.
type Subscriber struct {
	config SubscriberConfig
	logger watermill.LoggerAdapter
	acks   *acker

	closing chan struct{}
	subs    sync.WaitGroup // the subscriptions running

	mu     sync.Mutex
	closed bool
	// reading counts the subscriptions reading each stream: the first reads what the consumer left pending.
	reading map[string]int
}

// NewSubscriber returns a Subscriber; logger may be nil.
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	config.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	s := &Subscriber{config: config, logger: logger, closing: make(chan struct{}), reading: map[string]int{}}
	s.acks = newAcker(config.Client, config.ConsumerGroup, logger)
	return s, nil
}

// Subscribe reads topic (its partitions, with Partitions > 1) until ctx ends or the Subscriber closes; the
// channel is closed then. With a ConsumerGroup, the group is created where it does not exist yet, at
// OldestId.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	streams := s.streams(topic)
	if s.config.ConsumerGroup != "" {
		for _, stream := range streams {
			if err := s.createGroup(ctx, stream); err != nil {
				return nil, err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.subs.Add(1)
	sub := newSubscription(ctx, s, topic)
	for _, stream := range streams {
		sub.start(stream, s.reading[stream] == 0)
		s.reading[stream]++
	}
	go func() {
		sub.wait()
		s.mu.Lock()
		for _, stream := range streams {
			s.reading[stream]--
		}
		s.mu.Unlock()
		s.subs.Done()
	}()
	return sub.out, nil
}

// SubscribeInitialize creates topic's consumer group (Watermill's message.SubscribeInitializer).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.config.ConsumerGroup == "" {
		return nil
	}
	for _, stream := range s.streams(topic) {
		if err := s.createGroup(context.Background(), stream); err != nil {
			return err
		}
	}
	return nil
}

func (s *Subscriber) streams(topic string) []string {
	if s.config.Partitions <= 1 {
		return []string{topic}
	}
	streams := make([]string, s.config.Partitions)
	for i := range streams {
		streams[i] = PartitionTopic(topic, i)
	}
	return streams
}

func (s *Subscriber) createGroup(ctx context.Context, stream string) error {
	err := s.config.Client.XGroupCreateMkStream(ctx, stream, s.config.ConsumerGroup, s.config.OldestId).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %s of %s: %w", s.config.ConsumerGroup, stream, err)
	}
	return nil
}

// Close ends every subscription, waits for their channels to close, and sends the acks already given.
// Messages handed out and not acked stay pending: a claim (or this consumer's next subscription) hands
// them out again. It does not close Client.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.subs.Wait()
	s.acks.close()
	return nil
}
