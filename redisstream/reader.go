package redisstream

import (
	"cmp"
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

// Defaults of readerConfig.
const (
	// readerMaxInFlight is how many messages a subscriber has out to the router at once: 128.
	readerMaxInFlight = 128
	// readerReadCount is the most entries one read takes from the partitions: 100.
	readerReadCount = 100
	// readerClaimInterval is how often a subscriber looks for idle entries to claim: 1 s.
	readerClaimInterval = time.Second
	// readerPruneInterval is how often a subscriber looks for consumers of the group to delete: 5 min.
	readerPruneInterval = 5 * time.Minute
	// readerConsumerTimeout is how long a consumer with nothing pending must have been idle before it is
	// deleted from the group: 10 min.
	readerConsumerTimeout = 10 * time.Minute
	// readerNackPause is how long a nacked message keeps its place among those in flight: 500 ms.
	readerNackPause = 500 * time.Millisecond
)

// readerConfig is what a reader needs.
type readerConfig struct {
	// Partitions are the streams read: a subscription's topic, or its partitions (SubscriberConfig.Partitions).
	Partitions []partition
	Group      string // the consumer group; it exists before Subscribe (see ReplayFrom when it is lost)
	Consumer   string // the subscriber's name in the group
	// MaxInFlight bounds the messages out to the router at once (each handled by a goroutine of its own),
	// hence the entries read and not yet acked or nacked; 0 means readerMaxInFlight.
	MaxInFlight int
	// ReadCount bounds the entries one read (or claim) takes; 0 means readerReadCount.
	ReadCount    int
	PoisonMaxLen int // approximate bound of the poison streams (oversized entries go there)
	// MaxEntryBytes is the largest entry (field names and values) handed out; a larger one is moved to
	// the partition's poison stream inside Redis. 0 means DefaultMaxEntryBytes.
	MaxEntryBytes int
	// Events says how an idle subscriber learns of new entries: by polling (KeyspaceEventsOff, the default) or by
	// waiting for a keyspace event (KeyspaceEventsOn, KeyspaceEventsAuto).
	Events KeyspaceEvents
	// ClaimIdle is how long an entry must have been pending, untouched, before the subscriber claims it:
	// its consumer died, or handed a failed attempt back. Required.
	ClaimIdle time.Duration
	// ClaimInterval is how often the subscriber claims idle entries, on the partitions it owns (every
	// partition without keyspace events); 0 means readerClaimInterval.
	ClaimInterval time.Duration
	// PruneInterval is how often the subscriber looks for consumers to delete, one partition per look, in
	// turn from a random one; 0 means readerPruneInterval.
	PruneInterval time.Duration
	// ConsumerTimeout: a consumer idle longer than this with nothing pending is deleted from the group
	// (Group.PruneConsumer); 0 means readerConsumerTimeout.
	ConsumerTimeout time.Duration
	// NackPause is how long a nacked message keeps its place among those in flight; 0 means
	// readerNackPause.
	NackPause time.Duration
	Logger    *slog.Logger // nil: slog.Default()
	// Failing is when reads started failing (unix ns), 0 while they succeed. nil: not recorded.
	Failing *atomic.Int64
	// ReplayFrom is where a lost group is created again: the first entry whose outcome record may still
	// exist (see the worker's OUTCOME_TTL). Required.
	ReplayFrom func(time.Time) string
	// Handling is the messages' context instead of the subscription's: a message being handled when the
	// subscription ends (the router closes) keeps its context until Handling ends (the worker's
	// SHUTDOWN_TIMEOUT), with Handling's cause. nil: the subscription's context.
	Handling context.Context
	// Released: the router's handler frees each message's place in flight itself, calling Release with its
	// error once it is done with the message (just before the router acks or nacks it), instead of the
	// subscriber waiting for the ack or the nack in a goroutine per message (half the goroutines a message
	// costs: ~5 % of a worker's CPU). A handler that does not call Release for every message stalls the
	// subscription once MaxInFlight messages are out.
	Released bool
	// MessageContexts gives each message a context of its own, a child of Handling's (or the
	// subscription's), that ends at its Ack or Nack: Watermill's contract, which the public Pub/Sub keeps
	// (package redisstream). Without it every message shares the one context (a context per message cost a
	// worker ~4 % of its CPU). Not with Released.
	MessageContexts bool
	// ResendNacked sends a nacked message out again, a copy, after ResendPause (0: at once), keeping its
	// place in flight: Watermill's contract, which the public Pub/Sub keeps. Without it a nacked entry stays
	// pending in Redis for a claim (the worker's hand-back: a failed attempt does not hold the consumer).
	// Not with Released.
	ResendNacked bool
	ResendPause  time.Duration
	// RoomLinger: once a place in flight is free, a read waits at most this long for half of them to be
	// (so that reads stay large under load) before it reads for the places free; 0: until half are.
	RoomLinger time.Duration
	// Unmarshaller, if set, reads the entries that have Watermill's UUID field (SubscriberConfig.Unmarshaller);
	// nil: Entry.Message's reader of watermill-redisstream's format.
	Unmarshaller unmarshaller
	// ShouldClaim, if set, chooses which of the entries idle past ClaimIdle a claim takes
	// (SubscriberConfig.ShouldClaimPendingMessage; choose). nil: all of them.
	ShouldClaim func(redis.XPendingExt) bool
	// StopOnReadError, if set, is asked about each read that failed: true ends the subscription
	// (SubscriberConfig.ShouldStopOnReadErrors). nil: the partition is skipped for a while and read again.
	StopOnReadError func(error) bool
	// Peeker, if set, looks for entries for the subscription while it polls idle, together with the
	// Subscriber's other subscriptions (peeker). nil: it reads every maxReadPause.
	Peeker *peeker
}

func (c *readerConfig) setDefaults() {
	c.MaxInFlight = cmp.Or(c.MaxInFlight, readerMaxInFlight)
	c.ReadCount = cmp.Or(c.ReadCount, readerReadCount)
	c.ClaimInterval = cmp.Or(c.ClaimInterval, readerClaimInterval)
	c.PruneInterval = cmp.Or(c.PruneInterval, readerPruneInterval)
	c.ConsumerTimeout = cmp.Or(c.ConsumerTimeout, readerConsumerTimeout)
	c.NackPause = cmp.Or(c.NackPause, readerNackPause)
	c.MaxEntryBytes = cmp.Or(c.MaxEntryBytes, DefaultMaxEntryBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Failing == nil {
		c.Failing = new(atomic.Int64)
	}
}

// Validate reports every setting of c that cannot work.
func (c readerConfig) Validate() error {
	var errs []error
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New("redisstream: subscriber: "+msg))
		}
	}
	check(len(c.Partitions) > 0, "no partitions")
	check(c.Group != "", "no consumer group")
	check(c.Consumer != "", "no consumer name")
	check(c.MaxInFlight >= 0 && c.ReadCount >= 0 && c.MaxEntryBytes >= 0, "MaxInFlight, ReadCount or MaxEntryBytes is negative")
	check(c.ClaimIdle > 0, "ClaimIdle is not positive")
	check(c.ReplayFrom != nil, "no ReplayFrom")
	check(!c.Released || !c.MessageContexts && !c.ResendNacked, "Released with MessageContexts or ResendNacked")
	return errors.Join(errs...)
}

// reader is a worker's consumer of the orders' consumer group: a Watermill message.Subscriber that
// feeds a Router many messages at once, read in batches.
//
//   - Subscribe's topic stands for every partition of the orders (readerConfig.Partitions). A read takes
//     up to ReadCount entries, split over the partitions whose reads work, in one pipeline (one round trip
//     per Redis node). A partition whose reads fail (its cluster node is down) is skipped for a while, 100
//     ms doubling to 5 s, while the others are read; readerConfig.Failing says since when some
//     partition fails.
//   - Up to MaxInFlight messages are out to the router at once, each handled by a goroutine of the
//     router's; a read waits until half of them are back (acked or nacked), or all when fewer were out, so
//     reads stay large under load and come at once when the worker is idle.
//   - Entries are read and claimed by fetch.lua, which poisons oversized entries (MaxEntryBytes) inside
//     Redis, so a worker never holds one, and returns each entry's delivery count (Deliveries). A call whose
//     reply was lost, made again (by go-redis, or by the next call of its partition: requests), hands the
//     same entries over without another delivery; it is logged and counted (lostReplies).
//   - When no partition has an entry, the subscriber waits for a keyspace event of a partition's stream
//     (an XADD: it carries no payload) unless readerConfig.Events is off, and then reads with the script
//     again; it still looks every idlePoll in case an event was missed (with KeyspaceEventsAuto, a look that finds
//     entries checks that Redis still publishes the events, and turns them on again when an operator
//     turned them off). Without keyspace events it polls, every 10 ms doubling to 100 ms, and then
//     with the Subscriber's peeker, which looks at every idle subscription's streams in one pipeline.
//   - A message keeps its publisher's UUID (a plain entry's is its entry id), as Watermill's contract has
//     it; EntryID and EntryPartition say where it came from (the public Pub/Sub's metadata keys); its
//     metadata and trace context are the entry's (Entry.Message). An entry that cannot be read is marked
//     with UnmarshalError, for the poison stream.
//   - Every ClaimInterval it claims, in one pipeline, the entries idle longer than ClaimIdle (XAUTOCLAIM):
//     those of dead consumers, and failed attempts handed back; with keyspace events only on the partitions
//     it owns (2 live owners a partition, owners), so that idle consumers cost the same however many there
//     are, and on every partition without them. Its look every idlePoll is at the partitions it owns too. Entries found deleted from
//     the stream while pending (trimmed, or deleted by a producer's XADD MAXLEN) are counted in
//     stockflow.messages.deleted and logged: their orders were never decided.
//   - Every PruneInterval it deletes, on one partition in turn, the consumers idle longer than
//     ConsumerTimeout with nothing pending (Group.PruneConsumer).
//   - A missing consumer group (Redis restarted without its data, the stream deleted) is created again,
//     from ReplayFrom.
//
// Ack acknowledges the entry in Redis: the acks given while one pipeline is on its way go together in the
// next, one XACK per partition (FlushAcks waits for them). Nack leaves the entry pending in Redis, where it
// is claimed again once idle for ClaimIdle (by any consumer, this one too; the worker's delivery steps hand a
// failed attempt back for a claim about a second later first), and frees its place after NackPause, or at
// once when the handler failed with ErrLeftPending; a nacked message is never sent again. (With Released
// set, the handler frees the places: Release.)
//
// A message's context is the subscription's, or Handling if set: it ends when that ends, not when the
// message is acked or nacked (a context per message cost a worker ~4 % of its CPU). Close ends the
// subscription and waits for its goroutines; it does not wait for the messages being handled, and does not
// close the Redis client.
type reader struct {
	rdb redis.UniversalClient
	cfg readerConfig

	mu         sync.Mutex
	subscribed bool
	closed     bool
	cancel     context.CancelFunc // ends the subscription; nil before Subscribe
	running    sync.WaitGroup

	// slots holds a token per message in flight; a token is taken before a read and given back when the
	// message is acked or nacked.
	slots chan struct{}
	freed chan struct{} // a place was freed
	// resending counts the goroutines that may send a nacked message again (ResendNacked): the channel
	// closes once they are done.
	resending sync.WaitGroup
	// out holds the messages out whose ack awaitAck waits for (without Released), for FlushAcks: an ack
	// given just before it may not have reached awaitAck yet. Each maps to its entryRef, taken before the
	// message went out: its handler may write its metadata meanwhile.
	out sync.Map
	// sendsEnded is closed once the subscription sends nothing more (its channel is closed).
	sendsEnded chan struct{}

	// The read loop's state; only the read loop (readLoop) touches it.
	next     int           // the partition the next read starts at
	dry      int           // partitions read empty since a read last found entries
	pause    time.Duration // the current pause after an empty read, when polling
	failed   []failure     // by partition: how long its reads are skipped after a failure, and until when
	failing  int           // partitions in failed with a pause
	acks     *acks
	claims   claims
	requests requests  // the fetch calls' request ids
	bell     *doorbell // nil: polling
	// owners is bell's owners once subscribed with keyspace events, for Owns (read outside the read loop).
	owners atomic.Pointer[owners]
}

// Owns reports whether this consumer owns partition i among the group's live consumers (2 owners a
// partition, by rendezvous hashing), as it does for the keyspace events and the claims: true until it has
// subscribed with keyspace events, and always without them. Work that one or two consumers of the group
// must do for all, such as the worker's housekeeping, goes to the owners of partition 0.
func (s *reader) Owns(i int) bool {
	o := s.owners.Load()
	return o == nil || o.owned[i].Load()
}

var _ message.Subscriber = (*reader)(nil)

// errReaderClosed: Subscribe after Close.
var errReaderClosed = errors.New("redisstream: reader closed")

// errSubscribed: a second Subscribe; a reader is one consumer, with one subscription.
var errSubscribed = errors.New("redisstream: reader subscribed already")

// newReader returns a subscriber that reads with rdb, which it never closes.
func newReader(rdb redis.UniversalClient, cfg readerConfig) (*reader, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Partitions)
	return &reader{rdb: rdb, cfg: cfg, next: rand.IntN(n), failed: make([]failure, n),
		slots: make(chan struct{}, cfg.MaxInFlight), freed: make(chan struct{}, 1), claims: newClaims(n), requests: newRequests(), acks: newAcks(rdb, cfg),
		sendsEnded: make(chan struct{})}, nil
}

// Subscribe starts reading; topic is a name for the orders, whose partitions the config lists. The
// channel is closed when the subscription ends: ctx is done or Close was called.
func (s *reader) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errReaderClosed
	case s.subscribed:
		return nil, errSubscribed
	}
	s.subscribed = true
	ctx, s.cancel = context.WithCancel(ctx)
	deletedEntries.Add(ctx, 0) // on /metrics from the start, for the alert on its increase
	if s.cfg.Events != KeyspaceEventsOff {
		s.bell = newDoorbell(ctx, s.rdb, s.cfg)
		s.owners.Store(s.bell.owners)
	}
	out := make(chan *message.Message)
	s.running.Add(2)
	go func() {
		defer s.running.Done()
		defer close(s.sendsEnded)
		defer close(out)
		defer s.resending.Wait()
		s.readLoop(ctx, out)
	}()
	go func() {
		defer s.running.Done()
		s.prune(ctx)
	}()
	return out, nil
}

// Close ends the subscription and waits for its goroutines.
func (s *reader) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.running.Wait()
	if s.bell != nil {
		s.bell.close()
	}
	return nil
}

// setContext gives msg its context: handling, or with MessageContexts a child of it; the function returned
// ends the child.
func (s *reader) setContext(msg *message.Message, handling context.Context) context.CancelFunc {
	if !s.cfg.MessageContexts {
		msg.SetContext(handling)
		return func() {}
	}
	ctx, end := messageContext(handling)
	msg.SetContext(ctx)
	return end
}

// messageContext is a message's own context, a child of parent, and the function that ends it. Ended after
// parent was, it ends with parent's cause: it waits for parent's cancellation to reach the child (Go closes
// a parent's channel before it cancels its children) rather than cancel it first without one.
func messageContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	return ctx, func() {
		if parent.Err() != nil {
			<-ctx.Done()
		}
		cancel()
	}
}

// FlushAcks waits until the acks the router gave so far are sent to Redis, or ctx ends: before a consumer
// hands back what it still has pending, on shutdown.
func (s *reader) FlushAcks(ctx context.Context) error {
	s.out.Range(func(k, _ any) bool {
		if msg := k.(*message.Message); isAcked(msg) {
			s.acks.add(msg) // awaitAck may add it too: an entry acked twice is acked
		}
		return true
	})
	done := make(chan struct{})
	go func() {
		s.acks.flush()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// entryRef names the entry of a message out.
type entryRef struct{ stream, id string }

func refOf(msg *message.Message) entryRef { return entryRef{Stream(msg), EntryID(msg)} }

// held adds to ids the entry ids of stream's messages out in a handler and not nacked (those of an ended
// subscription until their late verdict; those acked until their ack is queued). Empty with Released,
// which keeps no list.
func (s *reader) held(stream string, ids map[string]bool) {
	s.out.Range(func(k, v any) bool {
		if ref := v.(entryRef); ref.stream == stream && !isNacked(k.(*message.Message)) {
			ids[ref.id] = true
		}
		return true
	})
}

func isAcked(msg *message.Message) bool  { return closed(msg.Acked()) }
func isNacked(msg *message.Message) bool { return closed(msg.Nacked()) }

// closed reports whether ch is closed (a message's Acked or Nacked), without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lateVerdictWait is how long the ack of a message out when its subscription ended is still sent: as long
// as Watermill's Router waits for its handlers on Close (RouterConfig.CloseTimeout's default).
const lateVerdictWait = 30 * time.Second

// lateVerdict sends the ack of msg, out when its subscription ended, should it come within lateVerdictWait:
// Watermill's Router closes its subscribers first, then waits for the handlers still running, whose acks
// would otherwise leave their entries pending, to be claimed and handled again. msg stays among those out
// until then, so that FlushAcks finds its ack.
func (s *reader) lateVerdict(msg *message.Message) {
	t := time.NewTimer(lateVerdictWait)
	defer t.Stop()
	defer s.out.Delete(msg)
	select {
	case <-msg.Acked():
		s.acks.add(msg)
	case <-msg.Nacked():
	case <-t.C:
	}
}

// free frees a place in flight.
func (s *reader) free() {
	<-s.slots
	select { // awaitRoom looks again
	case s.freed <- struct{}{}:
	default:
	}
}

// awaitAck frees msg's place in flight once it is acked, or once it is nacked: NackPause after (which keeps a
// failing handler from racing through the stream), or with ResendNacked once a copy sent again is acked
// (or nacked for good); or when handling, its context, ends. end ends the message's own context
// (MessageContexts).
func (s *reader) awaitAck(ctx context.Context, out chan<- *message.Message, msg *message.Message,
	handling context.Context, end context.CancelFunc) {
	defer func() {
		// Whichever way the wait ends, an ack given counts: when the subscription ends, the ack, the
		// subscription's end and handling's may all be ready at once, and select picks one at random.
		switch {
		case isAcked(msg):
			s.acks.add(msg)
			s.out.Delete(msg)
		case isNacked(msg) || s.cfg.Handling != nil: // Handling ended: FlushAcks sent the last acks
			s.out.Delete(msg)
		default: // the subscription ended first
			go s.lateVerdict(msg)
		}
		s.free()
	}()
	var ended <-chan struct{} // the subscription's end, where it ends the wait
	resending := func() {}
	if s.cfg.ResendNacked {
		resending = sync.OnceFunc(s.resending.Done)
		defer resending()
		ended = ctx.Done()
	}
	for {
		select {
		case <-msg.Acked():
			end()
			return
		case <-msg.Nacked():
			end()
			if notPending(msg) { // another consumer's now: not handed out again
				return
			}
			if !s.cfg.ResendNacked {
				pauseFor(ctx, s.cfg.NackPause)
				return
			}
			s.out.Delete(msg)
			again, endAgain := s.resend(ctx, out, msg, handling)
			if again == nil {
				return // the entry stays pending, for a claim
			}
			msg, end = again, endAgain
		case <-handling.Done():
			end()
			return
		case <-ended: // the subscription's channel closes once nothing can send on it
			if s.cfg.Handling != nil { // the message keeps its context until Handling ends; no resend now
				resending()
				ended = nil
				continue
			}
			end() // an entry not acked stays pending, for a claim
			return
		}
	}
}

// resend sends a copy of msg, nacked, out again after ResendPause; nil when ctx ended first.
func (s *reader) resend(ctx context.Context, out chan<- *message.Message, msg *message.Message,
	handling context.Context) (*message.Message, context.CancelFunc) {
	if !pauseFor(ctx, s.cfg.ResendPause) {
		return nil, nil
	}
	again := msg.Copy()
	end := s.setContext(again, handling)
	s.out.Store(again, refOf(again))
	select {
	case out <- again:
		return again, end
	case <-ctx.Done():
		end()
		s.out.Delete(again)
		return nil, nil
	}
}

// pauseFor waits d; it reports false when ctx ended first.
func pauseFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// partition is one stream a reader reads, its index among the reader's streams, and where its oversized
// entries go.
type partition struct {
	Index          int
	Orders, Poison string
	Partitioned    bool // one of its topic's partitions; false: the topic's only stream
}
