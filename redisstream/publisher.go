package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ErrClosed is returned by a Publisher or Subscriber used after Close.
var ErrClosed = errors.New("redisstream: closed")

// PublisherConfig configures a Publisher; only Client is required.
type PublisherConfig struct {
	Client redis.UniversalClient
	// Marshaller writes a message's fields; nil means DefaultMarshallerUnmarshaller.
	Marshaller Marshaller
	// Maxlens bounds a topic's stream length (XADD MAXLEN ~); a topic not listed gets DefaultMaxlen.
	Maxlens map[string]int64
	// DefaultMaxlen is the approximate length bound of every other stream; 0 means unbounded.
	DefaultMaxlen int64
	// ConsumerGroup and Consumer make the Publisher a consumer's: a message marked as the answer to an entry
	// that consumer was handed (Answer) is written only while the entry is still pending to Consumer in
	// ConsumerGroup, checked in Redis in the same script call as the write. Both or neither; without them a
	// message marked so is refused.
	ConsumerGroup, Consumer string
	// ReplicaAcks, above 0, makes a Publish return nil only once that many replicas of each stream's
	// master have its writes (a WAIT after them, on their connection): a message then survives the
	// master's failover, and a consumer that acks an entry once its answer is published never has the ack
	// kept by a promoted replica that lost the answer. A message whose WAIT came short gets an error
	// wrapping ErrReplicaAcks (the master has it: publishing it again may write it twice). The Client must
	// be a *redis.Client, *redis.ClusterClient or *redis.Ring whose ReadTimeout exceeds ReplicaAckTimeout
	// by half a second.
	ReplicaAcks int
	// ReplicaAckTimeout bounds the WAIT; 0 means DefaultReplicaAckTimeout.
	ReplicaAckTimeout time.Duration
}

func (c *PublisherConfig) setDefaults() {
	if c.Marshaller == nil {
		c.Marshaller = DefaultMarshallerUnmarshaller{}
	}
}

// Validate reports a setting that cannot work.
func (c PublisherConfig) Validate() error {
	if c.Client == nil {
		return errors.New("redisstream: PublisherConfig.Client is nil")
	}
	if c.DefaultMaxlen < 0 {
		return fmt.Errorf("redisstream: PublisherConfig.DefaultMaxlen %d is negative", c.DefaultMaxlen)
	}
	if (c.ConsumerGroup == "") != (c.Consumer == "") {
		return fmt.Errorf("redisstream: PublisherConfig.ConsumerGroup %q and Consumer %q: set both or neither", c.ConsumerGroup, c.Consumer)
	}
	for topic, n := range c.Maxlens {
		if n < 0 {
			return fmt.Errorf("redisstream: PublisherConfig.Maxlens[%q] %d is negative", topic, n)
		}
	}
	if c.ReplicaAcks < 0 || c.ReplicaAckTimeout < 0 {
		return fmt.Errorf("redisstream: PublisherConfig.ReplicaAcks %d or ReplicaAckTimeout %v is negative", c.ReplicaAcks, c.ReplicaAckTimeout)
	}
	return c.checkReplicaAcks()
}

// Publisher publishes messages to Redis Streams, one entry each (XADD).
type Publisher struct {
	config PublisherConfig
	logger watermill.LoggerAdapter

	mu     sync.RWMutex
	closed bool
	// answering lets one Publish of answers run at a time: answer.lua's note, which makes a call safe to
	// send again, is one per answered stream and consumer.
	answering sync.Mutex
}

// NewPublisher returns a Publisher; logger may be nil.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{config: config, logger: logger}, nil
}

// Publish appends msgs to the stream named topic, in order, in one round trip (a pipeline when there are
// several), and returns once Redis has them. It uses the first message's context. On an error, some of
// msgs may have been written: publish them again (a subscriber may then see one twice, with one UUID).
//
// A message marked as an answer (Answer) goes to topic's partition of its question, in the question's
// slot, only while the question's entry is pending to the Consumer: the answers to one stream's entries in
// one script call, in the same round trip, in order among themselves, the other messages after them. An
// answer not written gets ErrNotPending, in a PublishErrors (each message's error by its position), and its
// question is marked MetadataNotPending (the Subscriber then leaves its entry to the claimer). An
// answer's call is safe to send again after a lost reply (go-redis does): it finds its note and writes
// nothing twice. The note is one per answered stream and consumer, so a Publisher sends one Publish of
// answers at a time, and a consumer's answers go through one Publisher.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	if slices.ContainsFunc(msgs, func(m *message.Message) bool { return m.Metadata.Get(MetadataAnswers) != "" }) {
		return p.publishAnswers(topic, msgs)
	}
	args, err := p.xadds(topic, msgs)
	if err != nil {
		return err
	}
	ctx := msgs[0].Context()
	if p.config.ReplicaAcks > 0 {
		return p.publishWaited(ctx, topic, args)
	}
	if len(args) == 1 {
		if err := p.config.Client.XAdd(ctx, args[0]).Err(); err != nil {
			return fmt.Errorf("redisstream: publish message %s to %s: %w", msgs[0].UUID, topic, err)
		}
		return nil
	}
	pipe := p.config.Client.Pipeline()
	for _, a := range args {
		pipe.XAdd(ctx, a)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisstream: publish %d messages to %s: %w", len(msgs), topic, err)
	}
	return nil
}

// publishWaited writes the entries args to topic in one pipeline with a WAIT for ReplicaAcks replicas.
func (p *Publisher) publishWaited(ctx context.Context, topic string, args []*redis.XAddArgs) error {
	w := p.newWrites(ctx)
	adds := make([]*redis.StringCmd, len(args))
	for i, a := range args {
		adds[i] = w.to(topic).XAdd(ctx, a)
	}
	w.exec()
	for _, add := range adds {
		if err := add.Err(); err != nil {
			return fmt.Errorf("redisstream: publish %d messages to %s: %w", len(args), topic, err)
		}
	}
	return w.acked(topic)
}

// maxlen is the approximate length bound of the first of streams in Maxlens, else DefaultMaxlen.
func (p *Publisher) maxlen(streams ...string) int64 {
	for _, s := range streams {
		if n, ok := p.config.Maxlens[s]; ok {
			return n
		}
	}
	return p.config.DefaultMaxlen
}

// xadds are the XADDs of msgs to topic, each marshalled by the Marshaller.
func (p *Publisher) xadds(topic string, msgs []*message.Message) ([]*redis.XAddArgs, error) {
	args := make([]*redis.XAddArgs, len(msgs))
	for i, msg := range msgs {
		values, err := p.config.Marshaller.Marshal(topic, msg)
		if err != nil {
			return nil, fmt.Errorf("redisstream: marshal message %s: %w", msg.UUID, err)
		}
		args[i] = p.xaddArgs(topic, values)
	}
	return args, nil
}

// xaddArgs is the XADD of values to topic.
func (p *Publisher) xaddArgs(topic string, values any) *redis.XAddArgs {
	maxlen := p.maxlen(topic)
	return &redis.XAddArgs{Stream: topic, Values: values, MaxLen: maxlen, Approx: maxlen > 0}
}

// Close makes every later Publish fail with ErrClosed. It does not close Client, which is the caller's.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// TracingPublisher traces every message published with a producer span, "send <stream>", and passes the trace
// context on in the metadata; the messages of one Publish go to the Publisher in one call.
type TracingPublisher struct {
	message.Publisher
	// Server is the address of the Redis it writes to (ServerAttributes); nil: unknown.
	Server []attribute.KeyValue
}

func (p TracingPublisher) Publish(topic string, msgs ...*message.Message) error {
	spans := make([]trace.Span, len(msgs))
	var send sendSpans
	for i, msg := range msgs {
		if dest := destination(topic, msg); send.dest != dest {
			send = newSendSpans(dest, p.Server)
		}
		_, spans[i] = send.start(msg)
	}
	err := p.Publisher.Publish(topic, msgs...)
	var each PublishErrors
	if !errors.As(err, &each) || len(each) != len(msgs) {
		each = nil
	}
	for i, span := range spans {
		if e := err; e != nil && (each == nil || each[i] != nil) {
			Fail(span, cmp.Or(each.of(i), e))
		}
		span.End()
	}
	return err
}
