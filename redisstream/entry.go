package redisstream

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Entry is one entry of an orders partition as a reader fetched it (fetch.lua).
type Entry struct {
	ID string
	// Partition is its stream's index among the streams read: with Partitioned, among its topic's partitions
	// (SubscriberConfig.Partitions), and in its message's metadata (EntryPartition); else 0, the topic's only
	// stream.
	Partition   int
	Partitioned bool
	Stream      string // its stream (the partition's)
	// Deliveries is how many times the entry was delivered, failed attempts given back not counted.
	Deliveries int64
	// Values are its fields; Message may change them. Their strings may be part of the packed entries of
	// the whole read (unpackEntries): Message copies what the message keeps.
	Values map[string]any
	// Repeated is the first field name the entry has twice (XADD accepts that), "" when none: such an
	// entry is poisoned, since readers that keep the first or the last value would read it two ways.
	Repeated string
}

// set adds a field to e.Values, noting the first repeated name.
func (e *Entry) set(name string, value any) {
	if _, seen := e.Values[name]; seen && e.Repeated == "" {
		e.Repeated = name
	}
	e.Values[name] = value
}

// Message reads the entry as a message, as Watermill's contract has it: a Watermill entry
// (_watermill_message_uuid, metadata, payload) keeps its publisher's UUID; a plain one that any Redis client
// can write (XADD orders * payload '<json>') has none, and gets the entry id. Its metadata says the entry id,
// the delivery count and the partition (EntryID, Deliveries, EntryPartition). It never fails: an entry it
// cannot read becomes a message marked with UnmarshalError, for the poison stream, so it never stays pending for
// the next consumer to choke on.
func (e Entry) Message() *message.Message { return e.MessageWith(nil) }

// MessageWith is Message, reading an entry that has Watermill's UUID field with u instead when u is not nil.
func (e Entry) MessageWith(u unmarshaller) (msg *message.Message) {
	defer func() {
		// A panic here would take the whole process down (it runs in the subscriber's goroutine).
		if v := recover(); v != nil {
			msg = badEntry(e.ID, fmt.Sprintf("unreadable entry: %v", v))
		}
		msg.Metadata.Set(MetadataEntryID, e.ID)
		msg.Metadata.Set(MetadataDeliveries, strconv.FormatInt(e.Deliveries, 10))
		if e.Partitioned {
			msg.Metadata.Set(metaPartition, strconv.Itoa(e.Partition))
		}
		if e.Stream != "" {
			msg.Metadata.Set(MetadataStream, e.Stream)
		}
	}()
	if e.Repeated != "" {
		return badEntry(e.ID, fmt.Sprintf("field %q given twice: readers that keep the first or the last would read the entry two ways", e.Repeated))
	}
	values := e.Values
	if values == nil {
		values = map[string]any{}
	}
	if _, ok := values[redisstream.UUIDHeaderKey]; ok && u != nil {
		m, err := u.Unmarshal(values)
		switch {
		case err != nil:
			return e.badEntry("unreadable entry: " + err.Error())
		case m.Metadata == nil:
			m.Metadata = make(message.Metadata)
		}
		markUnusual(m, values)
		return m
	}
	msg, ok := e.plainMessage()
	if !ok {
		if msg, ok = e.unmarshal(values); !ok {
			return msg
		}
	}
	markUnusual(msg, values)
	return msg
}

// unmarshal reads values with redisstream's unmarshaller; false with a bad entry's message when it cannot.
func (e Entry) unmarshal(values map[string]any) (*message.Message, bool) {
	if _, ok := values[redisstream.UUIDHeaderKey]; !ok {
		values[redisstream.UUIDHeaderKey] = e.ID
	}
	msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(values)
	if err != nil {
		return e.badEntry("unreadable entry: " + err.Error()), false
	}
	if msg.UUID == "" { // as plainMessage: an empty UUID field is none
		msg.UUID = e.ID
	}
	if msg.Metadata == nil { // a metadata field holding msgpack nil (found by FuzzUnmarshaller)
		msg.Metadata = make(message.Metadata)
	}
	return msg, true
}

// plainMessage reads the entry as unmarshal would when it is what producers write (a payload, and
// metadata that is a msgpack map of strings, or none), without redisstream's msgpack decoder (reflection,
// a reader and a map grown key by key); false for any other entry, which unmarshal reads.
// FuzzUnmarshaller holds the two equal.
func (e Entry) plainMessage() (*message.Message, bool) {
	payload, ok := e.Values["payload"].(string)
	md, mdOK := e.Values["metadata"].(string)
	if _, has := e.Values["metadata"]; !ok || has && !mdOK {
		return nil, false
	}
	var metadata message.Metadata // none: the message's own
	if md != "" {
		u := &unpacker{s: strings.Clone(md)} // one copy, which the metadata's strings share (md may be a read's)
		n := u.mapLen()
		metadata = make(message.Metadata, n+4) // and the entry id, delivery count, partition and stream (Message)
		for range n {
			k := u.str()
			metadata[k] = u.str()
		}
		if u.err != nil || u.s != "" {
			return nil, false
		}
	}
	uuid := e.ID // a plain entry's
	if u, ok := e.Values[redisstream.UUIDHeaderKey].(string); ok && u != "" {
		uuid = strings.Clone(u) // not the read's packed entries
	}
	msg := message.NewMessage(uuid, []byte(payload))
	if metadata != nil {
		msg.Metadata = metadata
	}
	return msg, true
}

// unmarshaller is Watermill's reader of an entry's fields (redisstream.Unmarshaller).
type unmarshaller interface {
	Unmarshal(values map[string]any) (*message.Message, error)
}

// markUnusual drops the metadata a producer must not set, takes the trace context a foreign producer sent
// as a field of its own, and marks an entry without a payload field as bad.
func markUnusual(msg *message.Message, values map[string]any) {
	if tp, ok := values["traceparent"].(string); ok && msg.Metadata.Get("traceparent") == "" {
		msg.Metadata.Set("traceparent", strings.Clone(tp)) // not the read's packed entries, which tp is part of
	}
	dropUntrusted(msg.Metadata)
	if _, ok := values["payload"]; !ok {
		msg.Metadata.Set(UnmarshalError, `entry has no "payload" field`)
	}
}

// Largest trace context taken from a producer: a version-00 traceparent has 55 characters; W3C caps
// tracestate at 512.
const (
	maxTraceparent = 128
	maxTracestate  = 512
)

var traceLimits = [...]struct {
	key string
	max int
}{{"traceparent", maxTraceparent}, {"tracestate", maxTracestate}}

// dropUntrusted removes the worker's own keys (stockflow_* and redisstream_*: only the subscriber marks
// entries), baggage (it would travel into every outcome event and span), and trace context over its size
// limit.
func dropUntrusted(md message.Metadata) {
	for k := range md {
		if strings.HasPrefix(k, "stockflow_") || strings.HasPrefix(k, "redisstream_") || k == "baggage" {
			delete(md, k)
		}
	}
	for _, l := range traceLimits {
		if len(md.Get(l.key)) > l.max {
			delete(md, l.key)
		}
	}
}

// badEntry is badEntry with the entry's payload field, when it has one (the message of an entry that is
// not Watermill's still carries what it was sent, for a handler or a poison queue to look at).
func (e Entry) badEntry(reason string) *message.Message {
	msg := badEntry(e.ID, reason)
	if p, ok := e.Values["payload"].(string); ok {
		msg.Payload = []byte(strings.Clone(p))
	}
	return msg
}

func badEntry(id, reason string) *message.Message {
	msg := message.NewMessage(id, nil)
	msg.Metadata.Set(UnmarshalError, reason)
	return msg
}
