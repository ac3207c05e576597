package redisstream

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// entryValues are the fields of msg's entry in redisstream's format, as its DefaultMarshallerUnmarshaller
// writes them (_watermill_message_uuid, metadata: a msgpack map of strings, payload), without the map and
// the msgpack encoder it makes for each message. MetadataAnswers is not written.
func entryValues(msg *message.Message) ([]any, error) {
	if msg.Metadata.Get(redisstream.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("metadata %s is reserved by watermill for message UUID", redisstream.UUIDHeaderKey)
	}
	n := len(msg.Metadata)
	if _, ok := msg.Metadata[MetadataAnswers]; ok {
		n--
	}
	var md []byte
	if n > 0 {
		size := 5
		for k, v := range msg.Metadata {
			size += len(k) + len(v) + 10
		}
		md = make([]byte, 0, size)
		md = appendMsgpackMapLen(md, n)
		for k, v := range msg.Metadata {
			if k != MetadataAnswers {
				md = appendMsgpackStr(appendMsgpackStr(md, k), v)
			}
		}
	}
	return []any{redisstream.UUIDHeaderKey, msg.UUID, "metadata", md, "payload", []byte(msg.Payload)}, nil
}

// sendSpans start the producer spans "send <topic>" of the messages sent to one topic.
type sendSpans struct {
	dest string
	name string
	opts []trace.SpanStartOption
}

func newSendSpans(topic string, server []attribute.KeyValue) sendSpans {
	attrs := append([]attribute.KeyValue{messagingSystem, semconv.MessagingOperationName(operationSend),
		semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(topic)}, server...)
	return sendSpans{dest: topic, name: spanName(operationSend, topic),
		opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}}
}

// start starts the producer span of sending msg, under the message's context, and writes its trace context
// into the message's metadata.
func (s sendSpans) start(msg *message.Message) (ctx context.Context, span trace.Span) {
	ctx, span = startSpan(msg.Context(), s.name, s.opts...)
	inject(ctx, msg)
	return ctx, span
}
