// Package redisstream is a Watermill Pub/Sub on Redis Streams, a drop-in for
// github.com/ThreeDotsLabs/watermill-redisstream: the same entry format (either side's publisher and
// subscriber interoperate), the same config names for what the two share, and every other field's zero
// value a working default. A user swaps one for the other by changing the import.
//
// It keeps Watermill's contract (its universal Pub/Sub tests pass against it, see pubsub_test.go):
//   - Subscribe(ctx, topic) reads the stream named topic, or its partitions topic:{0} .. topic:{N-1} when
//     SubscriberConfig.Partitions is N > 1 (PartitionTopic);
//   - a message keeps its publisher's UUID; the entry id, the stream and how many times Redis delivered the
//     entry go in its metadata (EntryID, Stream, Deliveries). An entry written without Watermill's fields
//     (XADD topic * payload ...) gets its entry id as UUID;
//   - Ack acknowledges the entry in Redis (XACK): the acks of every message acked while one XACK is on its way
//     go together in the next pipeline, one XACK per stream;
//   - Nack hands the message out again after NackResendSleep, without a Redis call;
//   - a message's context ends at its Ack or Nack, and when its subscription ends;
//   - Close ends every subscription, sends the acks already given, and returns once the output channels are
//     closed.
//
// Where it differs from watermill-redisstream, and why:
//   - Reads are batched: up to ReadBatchSize entries a round trip (watermill-redisstream reads one) and,
//     while up to MaxInFlight messages are out, the next read does not wait for the last ack. Messages are
//     handed out in stream order, but a Router handles them concurrently (GuaranteedOrder is false for both).
//   - Idle, a subscription costs one blocking XREADGROUP per BlockTime (1 s by default; 100 ms there) and
//     one XAUTOCLAIM per ClaimInterval.
//   - Claims of idle pending entries (a dead consumer's) are one XAUTOCLAIM per ClaimInterval, and a
//     claimed entry carries its delivery count.
//   - A subscription first reads the entries its consumer name left pending (a restart under the same
//     name), instead of waiting MaxIdleTime for a claim.
//   - An entry it cannot unmarshal is handed out, not dropped and not a reason to stop the subscription
//     (watermill-redisstream stops): its UUID is the entry id, its payload the raw payload field, and its
//     metadata holds UnmarshalError, for the handler (or a poison queue) to deal with.
//   - Close does not close Client: the client is the caller's.
//   - ShouldClaimPendingMessage, ShouldStopOnReadErrors and DisableIndefiniteInitialBlock do not exist here
//     (a read error is logged and retried with a growing pause; no read blocks longer than BlockTime).
//
// Memory: a subscription holds at most MaxInFlight messages unacked, so a worker's memory is bounded by
// MaxInFlight times the largest entry a producer may write; bound that with the producer's Redis ACL and
// proto-max-bulk-len.
//
// Delivery is at least once: a lost XADD reply that go-redis resends writes the message twice (with the
// same UUID), and a message whose ack was lost is claimed and handed out again.
package redisstream
