package redisstream

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
)

// The entry format is watermill-redisstream's own, so that either side's publisher and subscriber
// interoperate: its fields _watermill_message_uuid, metadata (msgpack) and payload.
type (
	// Marshaller turns a message into an entry's fields.
	Marshaller = redisstream.Marshaller
	// Unmarshaller turns an entry's fields into a message.
	Unmarshaller = redisstream.Unmarshaller
	// MarshallerUnmarshaller does both.
	MarshallerUnmarshaller = redisstream.MarshallerUnmarshaller
	// DefaultMarshallerUnmarshaller is watermill-redisstream's format.
	DefaultMarshallerUnmarshaller = redisstream.DefaultMarshallerUnmarshaller
)

// UUIDHeaderKey is the entry field that holds the message's UUID.
const UUIDHeaderKey = redisstream.UUIDHeaderKey

// Metadata the subscriber sets on every message it hands out; the same keys sent by a publisher are
// overwritten.
const (
	// MetadataEntryID is the entry's id in its stream.
	MetadataEntryID = "redisstream_entry_id"
	// MetadataStream is the stream the entry was read from (a partition's name when partitioned).
	MetadataStream = "redisstream_stream"
	// MetadataDeliveries is how many times Redis delivered the entry to a consumer of the group (1 on its
	// first read; a claim adds one). In-process resends after a Nack do not count.
	MetadataDeliveries = "redisstream_deliveries"
	// UnmarshalError is set, with the reason, on a message whose entry could not be unmarshalled (or is
	// larger than MaxEntryBytes). The worker's poison step sends such messages to the poison stream without
	// running the handler.
	UnmarshalError = "redisstream_unmarshal_error"
)

// metaPartition is the index of the partition an entry was read from, among its topic's partitions; a
// message of a topic's only stream has none.
const metaPartition = "stockflow_partition"

// EntryPartition returns the index of the partition msg's entry was read from, among its topic's partitions
// (0 for an entry of a topic's only stream).
func EntryPartition(msg *message.Message) int {
	n, _ := strconv.Atoi(msg.Metadata.Get(metaPartition))
	return n
}

// EntryID returns the id of msg's entry in its stream (its UUID is its publisher's).
func EntryID(msg *message.Message) string { return msg.Metadata.Get(MetadataEntryID) }

// Stream returns the stream msg's entry was read from.
func Stream(msg *message.Message) string { return msg.Metadata.Get(MetadataStream) }

// Deliveries returns how many times Redis delivered msg's entry (0 when unknown).
func Deliveries(msg *message.Message) int64 {
	n, _ := strconv.ParseInt(msg.Metadata.Get(MetadataDeliveries), 10, 64)
	return n
}
