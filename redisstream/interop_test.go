package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wrs "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// sent is what the interop tests publish: payloads and metadata of several shapes, an empty one included.
func sent() []*message.Message {
	a := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"o-1"}`))
	a.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	a.Metadata.Set("empty", "")
	b := message.NewMessage(watermill.NewUUID(), nil)
	c := message.NewMessage(watermill.NewUUID(), []byte("\x00binary\xff"))
	c.Metadata.Set("k", "v")
	return []*message.Message{a, b, c}
}

func assertSame(t *testing.T, want []*message.Message, got <-chan *message.Message) {
	t.Helper()
	for i, w := range want {
		select {
		case m := <-got:
			if m.UUID != w.UUID || string(m.Payload) != string(w.Payload) {
				t.Errorf("message %d: got UUID %s payload %q, want %s %q", i, m.UUID, m.Payload, w.UUID, w.Payload)
			}
			for k, v := range w.Metadata {
				if got, ok := m.Metadata[k]; !ok || got != v {
					t.Errorf("message %d: metadata %q = %q (present %v), want %q", i, k, got, ok, v)
				}
			}
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of %d never arrived", i, len(want))
		}
	}
}

// Either library's publisher feeds either's subscriber: the same entry format both ways.
func TestEitherPublisherFeedsEitherSubscriber(t *testing.T) {
	ours := func(c redis.UniversalClient) (message.Publisher, message.Subscriber, error) {
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: c}, nil)
		if err != nil {
			return nil, nil, err
		}
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: c, ConsumerGroup: "g", Consumer: "c"}, nil)
		return pub, sub, err
	}
	theirs := func(c redis.UniversalClient) (message.Publisher, message.Subscriber, error) {
		pub, err := wrs.NewPublisher(wrs.PublisherConfig{Client: c}, nil)
		if err != nil {
			return nil, nil, err
		}
		sub, err := wrs.NewSubscriber(wrs.SubscriberConfig{Client: c, ConsumerGroup: "g", Consumer: "c"}, nil)
		return pub, sub, err
	}
	type side func(redis.UniversalClient) (message.Publisher, message.Subscriber, error)
	for _, tc := range []struct {
		name     string
		pub, sub side
	}{
		{"our publisher, watermill-redisstream's subscriber", ours, theirs},
		{"watermill-redisstream's publisher, our subscriber", theirs, ours},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			pub, unusedSub, err := tc.pub(srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			unusedPub, sub, err := tc.sub(srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _, _ = sub.Close(), unusedSub.Close(), unusedPub.Close() }()
			msgs := sent()
			if err := pub.Publish("topic", msgs...); err != nil {
				t.Fatal(err)
			}
			out, err := sub.Subscribe(context.Background(), "topic")
			if err != nil {
				t.Fatal(err)
			}
			assertSame(t, msgs, out)
		})
	}
}
