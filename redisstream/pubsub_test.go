package redisstream_test

import (
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// features are those watermill-redisstream declares for itself in its own pubsub_test.go.
var features = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     false,
	GuaranteedOrderWithSingleSubscriber: true,
	Persistent:                          true,
	RequireSingleInstance:               false,
	NewSubscriberReceivesOldMessages:    true,
}

// pubSubs builds Pub/Subs the way a user would, with only Client, ConsumerGroup and Consumer set, on one
// redis-server shared by the whole suite.
type pubSubs struct {
	once   sync.Once
	server *redistest.Server
	top    *testing.T
}

func (p *pubSubs) client(t *testing.T) redis.UniversalClient {
	p.once.Do(func() { p.server = redistest.Start(p.top) })
	opts, err := p.server.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *pubSubs) create(t *testing.T) (message.Publisher, message.Subscriber) {
	return p.withGroup(t, watermill.NewShortUUID())
}

func (p *pubSubs) withGroup(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: p.client(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: p.client(t),
		ConsumerGroup: group, Consumer: watermill.NewShortUUID()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, sub
}

func TestWatermillsUniversalPubSubTestsPass(t *testing.T) {
	p := &pubSubs{top: t}
	tests.TestPubSub(t, features, p.create, p.withGroup)
}
