package redisstream

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	server []attribute.KeyValue // of the send spans: ServerAttributes(config.Client)

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
	return &Publisher{config: config, logger: logger, server: ServerAttributes(config.Client)}, nil
}

// Publish appends msgs to the stream named topic, in order, in one round trip (a pipeline when there are
// several), and returns once Redis has them. It uses the first message's context. On an error, some of
// msgs may have been written: publish them again (a subscriber may then see one twice, with one UUID).
//
// A message marked as an answer (Answer) goes to topic's partition of its question, in the question's
// slot, only while the question's entry is pending to the Consumer: the answers to one stream's entries in
// one script call, in the same round trip, in order among themselves, the other messages after them (the
// other messages first when Redis did not know the script, after a restart or failover: the answers' calls
// are then sent again, with the script's body, in a second round trip). An answer not written gets
// ErrNotPending, in a PublishErrors (each message's error by its position), and its question is marked
// MetadataNotPending (the Subscriber then leaves its entry to the claimer). An answer's call is safe to
// send again after a lost reply (go-redis does): it finds its note and writes nothing twice. The note is one per answered stream and consumer, so a Publisher sends one Publish of
// answers at a time, and a consumer's answers go through one Publisher.
//
// Each message is traced with a producer span, "send <stream>", under its context, by the global
// TracerProvider (none set: no span is recorded), and the trace context goes in its metadata (by the global
// propagator: W3C traceparent once one is set), for the consumer's span to continue.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) (err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	spans := p.startSends(topic, msgs) // a Publish after Close too: its spans record ErrClosed
	defer func() { endSends(spans, err) }()
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

// startSends starts the producer span of each of msgs, "send <stream>" under the message's context, and
// writes its trace context into the message's metadata.
func (p *Publisher) startSends(topic string, msgs []*message.Message) []trace.Span {
	spans := make([]trace.Span, len(msgs))
	var send sendSpans
	for i, msg := range msgs {
		if dest := destination(topic, msg); send.dest != dest {
			send = newSendSpans(dest, p.server)
		}
		_, spans[i] = send.start(msg)
	}
	return spans
}

// endSends ends the spans of a Publish (startSends) that returned err, marking those of the messages it
// failed.
func endSends(spans []trace.Span, err error) {
	var each PublishErrors
	if !errors.As(err, &each) || len(each) != len(spans) {
		each = nil
	}
	for i, span := range spans {
		if e := err; e != nil && (each == nil || each[i] != nil) {
			Fail(span, cmp.Or(each.of(i), e))
		}
		span.End()
	}
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

// Answers: a message published on behalf of one a consumer was handed (its outcome, its reply), written
// only while that entry is still the consumer's. A consumer that stalled past the claim idle time, its
// entries claimed by another meanwhile, publishes nothing for them: what it decided cannot come after (and
// contradict) what the claimer published since. The check and the writes are one script call (answer.lua)
// per answered stream, all in one pipeline; the entries are acked afterwards, by the Router's ack of their
// messages.

//go:embed answer.lua
var answerLua string

var answerScript = redis.NewScript(answerLua)

// MetadataAnswers marks a message as the answer to an entry (Answer): "<partition> <stream> <entry id>",
// the partition -1 for an entry of a topic's only stream. It is not written to the stream.
const MetadataAnswers = "redisstream_answers"

// ErrNotPending is the error of an answer that was not written: the entry it answers is no longer pending
// to the Publisher's Consumer (another consumer claimed it, or it was acked). Its question is marked
// (MetadataNotPending): the Subscriber neither acks its entry, which is the claimer's now, nor hands it out
// again, whether the handler then acks or nacks it.
var ErrNotPending = errors.New("redisstream: the answered entry is no longer pending to the consumer")

// MetadataNotPending marks a question whose answer met ErrNotPending: its entry is no longer the
// consumer's, and the Subscriber leaves it alone whatever the message's Ack or Nack.
const MetadataNotPending = "redisstream_not_pending"

// questionKey holds, in an answer's context, the question it answers (Answer).
type questionKey struct{}

// notPending reports whether msg's answer met ErrNotPending: its entry is no longer the consumer's.
func notPending(msg *message.Message) bool { return msg.Metadata.Get(MetadataNotPending) != "" }

// Answer marks answer as the answer to question, a message a Subscriber of this package handed out. A
// Publisher with a ConsumerGroup and Consumer writes answer only while question's entry is still pending to
// its Consumer, in the question's slot: to PartitionTopic(topic, i) when the question was read from
// partition i of its topic (SubscriberConfig.Partitions), else to topic. On a Redis Cluster the question's
// stream needs a hash tag (a partition's, or its own: {orders}) and an unpartitioned topic the same one.
// Answer keeps question in answer's context, to mark it should its answer meet ErrNotPending: a context
// set on answer afterwards should be derived from answer.Context(), and Publish then writes question's
// metadata (MetadataNotPending): question must not be read or answered by another goroutine meanwhile.
func Answer(answer, question *message.Message) {
	partition, ok := question.Metadata[metaPartition] // only a partition's entry has it
	if !ok {
		partition = "-1"
	}
	answer.Metadata.Set(MetadataAnswers, partition+" "+Stream(question)+" "+EntryID(question))
	answer.SetContext(context.WithValue(answer.Context(), questionKey{}, question))
}

// markNotPending marks the question of answer, an answer that met ErrNotPending (MetadataNotPending).
func markNotPending(answer *message.Message) {
	if q, ok := answer.Context().Value(questionKey{}).(*message.Message); ok {
		q.Metadata.Set(MetadataNotPending, "true")
	}
}

// answered is the entry answer answers (its stream, id and partition: -1 for a topic's only stream); ok
// false for a message that answers none.
func answered(answer *message.Message) (stream, id string, partition int, ok bool) {
	v := answer.Metadata.Get(MetadataAnswers)
	p, rest, _ := strings.Cut(v, " ")
	i := strings.LastIndexByte(rest, ' ')
	n, err := strconv.Atoi(p)
	if v == "" || i < 0 || err != nil {
		return "", "", -1, v != "" // a mark that does not parse answers nothing Publish can find: refused
	}
	return rest[:i], rest[i+1:], n, true
}

// answerStream is the stream of topic in which an answer to an entry of partition goes.
func answerStream(topic string, partition int) string {
	if partition < 0 {
		return topic
	}
	return PartitionTopic(topic, partition)
}

// destination is the stream msg goes to when published to topic.
func destination(topic string, msg *message.Message) string {
	if _, _, partition, ok := answered(msg); ok {
		return answerStream(topic, partition)
	}
	return topic
}

// PublishErrors is the error of a Publish that did not write every message: each message's error, by its
// position in the Publish, nil for a message written (ErrNotPending for an answer whose entry was no longer
// the consumer's). Its Unwrap gives every non-nil error; its text says each distinct one once.
type PublishErrors []error

func (e PublishErrors) Error() string {
	var msgs []string // each text once
	for _, err := range e.Unwrap() {
		if !slices.Contains(msgs, err.Error()) {
			msgs = append(msgs, err.Error())
		}
	}
	n := len(e.Unwrap())
	return fmt.Sprintf("redisstream: %d of %d messages not published: %s", n, len(e), strings.Join(msgs, "; "))
}

// of is the error of the i-th message; nil for one written, or when e is nil.
func (e PublishErrors) of(i int) error {
	if i < len(e) {
		return e[i]
	}
	return nil
}

func (e PublishErrors) Unwrap() []error {
	var errs []error
	for _, err := range e {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// answerCall is the script call of the answers to one stream's entries.
type answerCall struct {
	stream, results string
	topic           string // the topic published to (its Maxlens entry bounds results)
	req             string // the call's request id: the same when it is sent again after NOSCRIPT
	at              []int  // the positions in the Publish of its answers
	ids             []string
	lo, hi          string // the least and the greatest entry id answered
	cmd             *redis.Cmd
	acked           error // with ReplicaAcks: why the replicas may lack what the call wrote
}

// otherPending bounds the consumer's other pending entries (its messages in flight, attempts it handed back)
// that the script's one look at its pending entries in the call's range of ids may meet besides the
// answered ones. An entry past the bound is taken for settled elsewhere: not answered.
const otherPending = 10000

// answerCalls groups msgs by the stream each answers; plain are the positions of the messages that answer none.
// A call's slices are sized once, when its stream is first met (answersTo): no slices of the Publish's length.
func answerCalls(topic string, msgs []*message.Message) (calls []*answerCall, plain []int, err error) {
	for k, msg := range msgs {
		stream, id, partition, ok := answered(msg)
		if !ok {
			plain = append(plain, k)
			continue
		}
		if stream == "" || id == "" {
			return nil, nil, fmt.Errorf("redisstream: message %s answers a message that no Subscriber of this package handed out (no stream or entry id in its metadata)", msg.UUID)
		}
		i := slices.IndexFunc(calls, func(c *answerCall) bool { return c.stream == stream })
		if i < 0 {
			n := answersTo(stream, msgs[k:])
			calls = append(calls, &answerCall{stream: stream, results: answerStream(topic, partition), topic: topic,
				req: answerRequests.next(), lo: id, hi: id, at: make([]int, 0, n), ids: make([]string, 0, n)})
			i = len(calls) - 1
		}
		calls[i].add(k, id)
	}
	return calls, plain, nil
}

// answersTo counts the messages of msgs that answer entries of stream.
func answersTo(stream string, msgs []*message.Message) int {
	n := 0
	for _, msg := range msgs {
		if s, _, _, ok := answered(msg); ok && s == stream {
			n++
		}
	}
	return n
}

// add adds the answer at position k in the Publish, to the entry id.
func (c *answerCall) add(k int, id string) {
	c.at, c.ids = append(c.at, k), append(c.ids, id)
	if idBefore(id, c.lo) {
		c.lo = id
	}
	if idBefore(c.hi, id) {
		c.hi = id
	}
}

// publishAnswers writes msgs to topic, each answer only while its entry is pending to the Consumer: one
// answer.lua call per answered stream and one XADD per other message, all in one pipeline.
func (p *Publisher) publishAnswers(topic string, msgs []*message.Message) error {
	if p.config.ConsumerGroup == "" {
		return fmt.Errorf("redisstream: message %s answers an entry (Answer): the publisher needs PublisherConfig.ConsumerGroup and Consumer", msgs[0].UUID)
	}
	calls, plain, err := answerCalls(topic, msgs)
	if err != nil {
		return err
	}
	p.answering.Lock()
	defer p.answering.Unlock()
	ctx := msgs[0].Context()
	w := p.newWrites(ctx)
	if err := p.queueAnswers(ctx, w, calls, msgs, false); err != nil {
		return err
	}
	plainMsgs := make([]*message.Message, len(plain))
	for i, k := range plain {
		plainMsgs[i] = msgs[k]
	}
	args, err := p.xadds(topic, plainMsgs)
	if err != nil {
		return err
	}
	xadds := make([]*redis.StringCmd, len(plain))
	for i, a := range args {
		xadds[i] = w.to(topic).XAdd(ctx, a)
	}
	w.exec() // each command's error is read below
	for _, c := range calls {
		c.acked = w.acked(c.stream)
	}
	if err := w.acked(topic); err != nil {
		for _, x := range xadds {
			if x.Err() == nil {
				x.SetErr(err) // written, but perhaps not on the replicas
			}
		}
	}
	if err := p.sendAgainAfterNOSCRIPT(ctx, calls, msgs); err != nil {
		return err
	}
	return answerErrors(topic, msgs, calls, plain, xadds)
}

// sendAgainAfterNOSCRIPT sends again the calls that met NOSCRIPT (Redis restarted, or a node never ran the
// script: they wrote nothing) with the script's body (EVAL, which also teaches the node the script); the
// others are not sent again. Each goes under its request id: a NOSCRIPT may be a resend's, on a new master
// after a failover, of a call that ran on the old one. (Not SCRIPT LOAD first: on a cluster it asks every
// node, and fails while a failover leaves one unreachable.)
func (p *Publisher) sendAgainAfterNOSCRIPT(ctx context.Context, calls []*answerCall, msgs []*message.Message) error {
	again := slices.DeleteFunc(slices.Clone(calls), func(c *answerCall) bool { return !redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") })
	if len(again) == 0 {
		return nil
	}
	w := p.newWrites(ctx)
	if err := p.queueAnswers(ctx, w, again, msgs, true); err != nil {
		return err
	}
	w.exec()
	for _, c := range again {
		c.acked = w.acked(c.stream)
	}
	return nil
}

// answerErrors is publishAnswers' error: nil when every message was written (and acknowledged by the
// replicas ReplicaAcks asks for), else each one's.
func answerErrors(topic string, msgs []*message.Message, calls []*answerCall, plain []int, xadds []*redis.StringCmd) error {
	errs, failed := make(PublishErrors, len(msgs)), false
	for _, c := range calls {
		owned, err := c.owned()
		for j, k := range c.at {
			switch {
			case err != nil:
				errs[k] = fmt.Errorf("redisstream: publish %d answers to %s (of entries of %s): %w", len(c.at), c.results, c.stream, err)
			case !owned[j]:
				errs[k] = fmt.Errorf("%w: %s of %s", ErrNotPending, c.ids[j], c.stream)
				markNotPending(msgs[k])
			default:
				errs[k] = c.acked
			}
			failed = failed || errs[k] != nil
		}
	}
	for i, k := range plain {
		if err := xadds[i].Err(); err != nil {
			errs[k], failed = fmt.Errorf("redisstream: publish message %s to %s: %w", msgs[k].UUID, topic, err), true
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// queueAnswers queues the script call of each of calls on pipe: by its SHA (a Redis that does not know it
// answers NOSCRIPT), or with body, its text.
func (p *Publisher) queueAnswers(ctx context.Context, w *writes, calls []*answerCall, msgs []*message.Message, body bool) error {
	for _, c := range calls {
		pipe := w.to(c.stream)
		args, err := p.answerArgs(c, msgs)
		if err != nil {
			return err
		}
		keys := []string{c.stream, c.results, CommittedKey(c.stream, p.config.ConsumerGroup, p.config.Consumer)}
		if body {
			c.cmd = answerScript.Eval(ctx, pipe, keys, args...)
		} else {
			c.cmd = answerScript.EvalSha(ctx, pipe, keys, args...)
		}
	}
	return nil
}

// answerArgs are the arguments of c's script call (answer.lua).
func (p *Publisher) answerArgs(c *answerCall, msgs []*message.Message) ([]any, error) {
	args := make([]any, 0, 8+4*len(c.at))
	args = append(args, p.config.ConsumerGroup, p.config.Consumer, p.maxlen(c.results, c.topic), c.lo, c.hi,
		len(c.at)+otherPending, c.req)
	for i, k := range c.at {
		values, err := p.answerValues(c.results, msgs[k])
		if err != nil {
			return nil, err
		}
		args = append(args, c.ids[i], values[1], values[3], values[5])
	}
	return args, nil
}

// answerValues are msg's entry's fields and values in redisstream's format (answer.lua names the fields),
// without MetadataAnswers. A Marshaller of another format cannot write answers.
func (p *Publisher) answerValues(stream string, msg *message.Message) ([]any, error) {
	if _, ok := p.config.Marshaller.(DefaultMarshallerUnmarshaller); !ok {
		return nil, fmt.Errorf("redisstream: message %s answers an entry: answers are written in the default format, not PublisherConfig.Marshaller's", msg.UUID)
	}
	values, err := entryValues(msg)
	if err != nil {
		return nil, fmt.Errorf("redisstream: marshal message %s for %s: %w", msg.UUID, stream, err)
	}
	return values, nil
}

// CommittedKey is where answer.lua notes consumer's last call on stream (in its slot), for a call made again.
func CommittedKey(stream, group, consumer string) string {
	return stream + ":committed:" + group + ":" + consumer
}

// answerRequests numbers the answer calls of the process (their request ids).
var answerRequests = newRequestIDs()

// idBefore reports whether stream entry id a comes before b ("<ms>-<seq>"; an id that does not parse
// counts as 0-0).
func idBefore(a, b string) bool {
	am, as := parseID(a)
	bm, bs := parseID(b)
	return am < bm || am == bm && as < bs
}

func parseID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

// owned reports, by message, which answers the call wrote (their entries still the consumer's); an error
// when the call failed (nothing was written: the script checks before it writes).
func (c *answerCall) owned() ([]bool, error) {
	if err := c.cmd.Err(); err != nil {
		return nil, err
	}
	reply, ok := c.cmd.Val().([]any)
	if !ok || len(reply) != len(c.at) {
		return nil, fmt.Errorf("redisstream: unexpected answer reply %.200v", c.cmd.Val())
	}
	owned := make([]bool, len(reply))
	for i, r := range reply {
		owned[i] = r == int64(1)
	}
	return owned, nil
}
