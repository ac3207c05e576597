package redisstream

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/internal/stream"
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
	MetadataEntryID = stream.MetadataEntryID
	// MetadataStream is the stream the entry was read from (a partition's name when partitioned).
	MetadataStream = stream.MetadataStream
	// MetadataDeliveries is how many times Redis delivered the entry to a consumer of the group (1 on its
	// first read; a claim adds one). In-process resends after a Nack do not count.
	MetadataDeliveries = stream.MetadataDeliveries
	// UnmarshalError is set, with the reason, on a message whose entry could not be unmarshalled.
	UnmarshalError = stream.MetaBadEntry
)

// EntryID returns the id of msg's entry.
func EntryID(msg *message.Message) string { return msg.Metadata.Get(MetadataEntryID) }

// Stream returns the stream msg's entry was read from.
func Stream(msg *message.Message) string { return msg.Metadata.Get(MetadataStream) }

// Deliveries returns how many times Redis delivered msg's entry (0 when unknown).
func Deliveries(msg *message.Message) int64 {
	n, _ := strconv.ParseInt(msg.Metadata.Get(MetadataDeliveries), 10, 64)
	return n
}
