package stream

import (
	"cmp"
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Batch adds messages to a stream in a go-redis pipeline, so that many of them (and whatever else the
// caller queues, such as their orders' XACK) cost one round trip. Each entry is in redisstream's format,
// and gets the producer span and trace context Publisher would give it.
type Batch struct {
	Topic  string
	MaxLen int64 // the stream's approximate length cap (XADD MAXLEN ~); 0: none
	// Server is the address of the Redis it writes to (ServerAttributes); nil: unknown.
	Server []attribute.KeyValue
	spans  []trace.Span
	cmds   []*redis.StringCmd
	send   sendSpans // built at the first Add
}

// Add queues the XADD of msg on pipe.
func (b *Batch) Add(pipe redis.Pipeliner, msg *message.Message) error {
	if b.send.name == "" {
		b.send = newSendSpans(b.Topic, b.Server)
	}
	ctx, span := b.send.start(msg)
	values, err := entryValues(msg)
	if err != nil {
		Fail(span, err)
		span.End()
		return err
	}
	b.cmds = append(b.cmds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.Topic, Values: values, MaxLen: b.MaxLen, Approx: true}))
	b.spans = append(b.spans, span)
	return nil
}

// entryValues are the fields of msg's entry in redisstream's format, as its DefaultMarshallerUnmarshaller
// writes them (_watermill_message_uuid, metadata: a msgpack map of strings, payload), without the map and
// the msgpack encoder it makes for each message.
func entryValues(msg *message.Message) ([]any, error) {
	if msg.Metadata.Get(redisstream.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("metadata %s is reserved by watermill for message UUID", redisstream.UUIDHeaderKey)
	}
	var md []byte
	if len(msg.Metadata) > 0 {
		size := 5
		for k, v := range msg.Metadata {
			size += len(k) + len(v) + 10
		}
		md = make([]byte, 0, size)
		md = appendMsgpackMapLen(md, len(msg.Metadata))
		for k, v := range msg.Metadata {
			md = appendMsgpackStr(appendMsgpackStr(md, k), v)
		}
	}
	return []any{redisstream.UUIDHeaderKey, msg.UUID, "metadata", md, "payload", []byte(msg.Payload)}, nil
}

// End ends the spans of the messages added, once the pipeline was sent, and returns the first error of
// their XADDs (the pipeline's other commands may fail on their own).
func (b *Batch) End() error {
	var first error
	for i, span := range b.spans {
		if err := b.cmds[i].Err(); err != nil {
			Fail(span, err)
			first = cmp.Or(first, err)
		}
		span.End()
	}
	b.spans, b.cmds = nil, nil
	return first
}

// sendSpans start the producer spans "send <topic>" of the messages sent to one topic.
type sendSpans struct {
	name string
	opts []trace.SpanStartOption
}

func newSendSpans(topic string, server []attribute.KeyValue) sendSpans {
	attrs := append([]attribute.KeyValue{System, semconv.MessagingOperationName(OperationSend),
		semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(topic)}, server...)
	return sendSpans{name: SpanName(OperationSend, topic),
		opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}}
}

// start starts the producer span of sending msg, under the message's context, and writes its trace context
// into the message's metadata.
func (s sendSpans) start(msg *message.Message) (ctx context.Context, span trace.Span) {
	ctx, span = startSpan(msg.Context(), s.name, s.opts...)
	Inject(ctx, msg)
	return ctx, span
}
