// Package streamtest runs redisstream.Subscribers in tests.
package streamtest

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/redisstream"
)

// Subscribe starts the subscriber of cfg and subscribes to "orders"; it stops with the test.
func Subscribe(t testing.TB, cfg redisstream.SubscriberConfig) (*redisstream.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := redisstream.NewSubscriber(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return sub, msgs
}

// Receive returns the next message of msgs, nacked (the subscriber sends the next; the entry stays pending in
// Redis, as one being handled would), or nil when none comes within wait.
func Receive(t testing.TB, msgs <-chan *message.Message, wait time.Duration) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-msgs:
		if !ok {
			t.Fatal("the subscription ended")
		}
		msg.Nack()
		return msg
	case <-time.After(wait):
		return nil
	}
}
