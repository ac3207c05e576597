// Package redisstream is a Watermill Pub/Sub on Redis Streams, a drop-in for
// github.com/ThreeDotsLabs/watermill-redisstream: the same entry format (either side's publisher and
// subscriber interoperate), the same config names for what the two share, and every other field's zero
// value a working default. A user swaps one for the other by changing the import.
//
// It keeps Watermill's contract (its universal Pub/Sub tests pass against it, see pubsub_test.go):
//   - Subscribe(ctx, topic) reads the stream named topic, or its partitions topic:{0} .. topic:{N-1} when
//     SubscriberConfig.Partitions is N >= 1 (PartitionTopic);
//   - a message keeps its publisher's UUID; the entry id, the stream and how many times Redis delivered the
//     entry go in its metadata (EntryID, Stream, Deliveries). An entry written without Watermill's fields
//     (XADD topic * payload ...) gets its entry id as UUID;
//   - Ack acknowledges the entry in Redis (XACK): the acks of every message acked while one XACK is on its way
//     go together in the next pipeline, one XACK per stream;
//   - Nack hands the message out again after NackResendSleep, without a Redis call (not a question whose
//     answer met ErrNotPending: MetadataNotPending);
//   - a message's context ends at its Ack or Nack, and when its subscription ends (with
//     SubscriberConfig.HandlingContext, when that ends);
//   - Close ends every subscription, sends the acks already given, and returns once the output channels are
//     closed; the acks given after it (a Router's handlers finishing) are still sent, for up to 30 s.
//
// A consumer group's subscription is read by the stockflow worker's own reader (reader.go), kept to the
// contract above; where it differs from watermill-redisstream, and why:
//   - Reads are batched: up to ReadBatchSize entries a round trip, over every partition of the topic in one
//     pipeline (watermill-redisstream reads one entry a round trip), through a Lua script (fetch.lua) that
//     also returns each entry's delivery count. While up to MaxInFlight messages are out, the next read
//     waits until half of them are back, or 2 ms after one is, so reads stay large under load. Messages are
//     handed out in stream order, but a Router handles them concurrently (GuaranteedOrder is false for both).
//   - Memory is bounded by MaxInFlight times MaxEntryBytes (one read more after a lost read reply, whose
//     entries the call made again hands over): an entry larger than MaxEntryBytes is moved,
//     inside Redis, to PoisonTopicOf(stream) (or SubscriberConfig.PoisonTopic) with its size, field names and a prefix of its payload, and acked,
//     so that no subscriber ever holds it.
//   - A read or claim whose reply was lost (go-redis sends it again after a broken connection) hands the
//     same entries over again rather than the next ones, without another delivery.
//   - Idle, a subscription reads its streams again after 10 ms, doubling to 100 ms; from then on the
//     Subscriber looks at the streams of all its idle subscriptions together every 100 ms, one pipeline of
//     XINFO GROUPS (a command that carries no entry), and a subscription reads again when its group's lag
//     is above 0 or unknown (an entry a look misses is read after the next claim round, ClaimInterval).
//     There is no blocking read, so Close returns at once. BlockTime applies to fan-out reads only.
//   - Every ClaimInterval it claims the entries pending longer than MaxIdleTime (a dead consumer's), with
//     their delivery counts (with KeyspaceEvents, on the streams this consumer owns among the live ones); ClaimBatchSize is not used (ReadBatchSize bounds a claim too).
//   - The first subscription of a stream marks the entries its consumer name left pending (a restart under
//     the same name) idle, so that its first claim, at once, hands them out again instead of after MaxIdleTime.
//   - An entry it cannot unmarshal is handed out, not dropped and not a reason to stop the subscription
//     (watermill-redisstream stops): its UUID is the entry id, its payload the raw payload field, and its
//     metadata holds UnmarshalError, for the handler (or a poison queue) to deal with. So is an entry with a
//     field given twice, or without a payload field. Metadata keys starting redisstream_ or stockflow_,
//     baggage, and trace context over W3C's sizes are dropped from what a producer sent.
//   - A missing group (Redis restarted without its data) is created again at OldestId.
//   - Close does not close Client: the client is the caller's.
//   - Every field of watermill-redisstream's configs is here (a test holds it), so a user swaps the import:
//     ShouldClaimPendingMessage is asked about the idle entries a claim lists first (XPENDING, one round
//     trip more a claim round), ShouldStopOnReadErrors about each failed read (a partition whose reads
//     fail is otherwise skipped for a while, 100 ms doubling to 5 s, and logged; a fan-out subscription
//     reads again after 50 ms doubling to 2 s; true ends the subscription, and the entries the same
//     pipeline read from other partitions stay pending to the consumer until a claim), and
//     DisableIndefiniteInitialBlock changes nothing: no read blocks longer than BlockTime.
//   - On a Redis Cluster, the reader's notes for lost replies are keys named after the stream: a topic
//     needs a hash tag ({orders}) or Partitions, which gives each partition's streams one; so does a
//     PoisonTopic set without Partitions (it must hash with the topic).
//
// Without a ConsumerGroup (fan-out), every subscriber reads every entry with XREAD, from FanOutOldestId.
//
// The Publisher traces every message it publishes with a producer span and puts the trace context in its
// metadata (with the global TracerProvider and propagator; none set: nothing is recorded or written);
// besides the Pub/Sub, the package holds what the worker adds to it: Consumer and ProcessSpans (the
// consumer's process span, continuing the producer's trace).
//
// A consumer's Publisher (PublisherConfig.ConsumerGroup and Consumer) writes a message marked as the answer
// to an entry its consumer was handed (Answer) only while that entry is still pending to the consumer, in
// the entry's partition of the topic: the answers to one stream's entries in one script call (answer.lua),
// safe to send again after a lost reply. A consumer that stalled while another claimed its entries so
// publishes nothing that could contradict what the claimer published since (the worker's outcome events).
//
// Delivery is at least once: a lost XADD reply that go-redis resends writes the message twice (with the
// same UUID), and a message whose ack was lost is claimed and handed out again.
package redisstream
