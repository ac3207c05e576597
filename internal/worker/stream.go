package worker

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// entryIDField carries the stream entry ID from the subscriber's client to the unmarshaller, which is
// only given an entry's fields. It is removed before the fields are read.
const entryIDField = "\x00stockflow-entry-id"

// metaBadEntry marks, in a message's metadata, an entry that cannot be read as a message; its value is
// the reason. The poison middleware sends such messages to the poison stream without running the handler.
const metaBadEntry = "stockflow_bad_entry"

// subscriberClient is the Redis client given to the redisstream subscribers.
//   - It tags every entry read (XREADGROUP) or claimed (XCLAIM) with its stream ID, so the message UUID
//     is the entry ID: stable across redeliveries, and what XACK needs.
//   - Its Close does nothing: a subscriber closes the client it was given, and all subscribers share
//     this one. The worker closes the real client after the router stopped.
type subscriberClient struct{ redis.UniversalClient }

func (subscriberClient) Close() error { return nil }

func (c subscriberClient) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	cmd := c.UniversalClient.XReadGroup(ctx, a)
	for _, s := range cmd.Val() {
		tagEntries(s.Messages)
	}
	return cmd
}

func (c subscriberClient) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	cmd := c.UniversalClient.XClaim(ctx, a)
	tagEntries(cmd.Val())
	return cmd
}

func tagEntries(ms []redis.XMessage) {
	for i := range ms {
		if ms[i].Values == nil {
			ms[i].Values = map[string]any{}
		}
		ms[i].Values[entryIDField] = ms[i].ID
	}
}

// entryUnmarshaller reads Watermill entries (_watermill_message_uuid, metadata, payload) and plain ones
// that any Redis client can write (XADD orders * payload '<json>'). It never fails: an error would stop the
// subscriber for good and leave the entry pending for the next consumer to choke on. An entry it cannot
// read becomes a message marked with metaBadEntry, for the poison stream.
type entryUnmarshaller struct{}

func (entryUnmarshaller) Marshal(topic string, msg *message.Message) (map[string]any, error) {
	return redisstream.DefaultMarshallerUnmarshaller{}.Marshal(topic, msg)
}

func (entryUnmarshaller) Unmarshal(values map[string]any) (msg *message.Message, _ error) {
	id, _ := values[entryIDField].(string)
	delete(values, entryIDField)
	if id == "" { // not read through subscriberClient
		id = watermill.NewUUID()
	}
	if _, ok := values[redisstream.UUIDHeaderKey]; !ok {
		values[redisstream.UUIDHeaderKey] = id
	}
	// A panic here would take the whole process down (it runs in the subscriber's goroutine).
	defer func() {
		if v := recover(); v != nil {
			msg = message.NewMessage(id, nil)
			msg.Metadata.Set(metaBadEntry, fmt.Sprintf("unreadable entry: %v", v))
		}
	}()
	msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(values)
	if err != nil {
		msg = message.NewMessage(id, nil)
		msg.Metadata.Set(metaBadEntry, "unreadable entry: "+err.Error())
		return msg, nil
	}
	msg.UUID = id
	// A foreign producer may send its trace context as a field of its own.
	if tp, ok := values["traceparent"].(string); ok && msg.Metadata.Get("traceparent") == "" {
		msg.Metadata.Set("traceparent", tp)
	}
	if _, ok := values["payload"]; !ok {
		msg.Metadata.Set(metaBadEntry, `entry has no "payload" field`)
	}
	return msg, nil
}
