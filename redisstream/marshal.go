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
	// UnmarshalError is set, with the reason, on a message whose entry could not be unmarshalled.
	UnmarshalError = "redisstream_unmarshal_error"
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

// entryMessage turns one entry into a message: with u when the entry has Watermill's UUID field, else as a
// plain entry (XADD topic * payload ...) whose UUID is its id. It never fails: an entry u refuses comes out
// marked with UnmarshalError.
func entryMessage(u Unmarshaller, stream, id string, values map[string]any, deliveries int64) *message.Message {
	var msg *message.Message
	if _, ok := values[UUIDHeaderKey]; ok {
		m, err := unmarshal(u, values)
		if err != nil {
			msg = message.NewMessage(id, rawPayload(values))
			msg.Metadata.Set(UnmarshalError, err.Error())
		} else {
			msg = m
		}
	} else {
		msg = message.NewMessage(id, rawPayload(values))
	}
	msg.Metadata.Set(MetadataEntryID, id)
	msg.Metadata.Set(MetadataStream, stream)
	msg.Metadata.Set(MetadataDeliveries, strconv.FormatInt(deliveries, 10))
	return msg
}

// unmarshal runs u, a panic included (watermill-redisstream's own asserts field types).
func unmarshal(u Unmarshaller, values map[string]any) (msg *message.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			msg, err = nil, panicError{v}
		}
	}()
	msg, err = u.Unmarshal(values)
	if err == nil && msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	return msg, err
}

type panicError struct{ v any }

func (e panicError) Error() string { return "redisstream: unmarshal panicked: " + toString(e.v) }

func rawPayload(values map[string]any) []byte {
	s, _ := values["payload"].(string)
	return []byte(s)
}

func toString(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return "unexpected value"
}
