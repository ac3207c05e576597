package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A consumer answers the messages it handles, each answer written only while the message's entry is still
// its own: once another consumer of the group claimed the entry (this one stalled past MaxIdleTime), the
// answer is refused with ErrNotPending, so that it cannot contradict what the claimer publishes.
func ExampleAnswer() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: servers.Addrs(1)[0]})
	defer rdb.Close()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, nil)
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"question-1", "question-2"} {
		if err := pub.Publish("questions", message.NewMessage(id, []byte(id))); err != nil {
			panic(err)
		}
	}

	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	// The consumer's publisher: the same group and consumer as its subscriber.
	answers, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}, nil)
	if err != nil {
		panic(err)
	}
	questions, err := sub.Subscribe(ctx, "questions")
	if err != nil {
		panic(err)
	}
	for range 2 {
		q := <-questions
		if q.UUID == "question-2" { // another consumer claims this one meanwhile
			rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "questions", Group: "g", Consumer: "other",
				Messages: []string{redisstream.EntryID(q)}})
		}
		a := message.NewMessage("answer-to-"+q.UUID, []byte("42"))
		redisstream.Answer(a, q)
		switch err := answers.Publish("answers", a); {
		case errors.Is(err, redisstream.ErrNotPending):
			fmt.Println(q.UUID, "is another consumer's now: not answered")
			q.Nack() // the subscriber leaves the entry to its claimer: not acked, not handed out again
		case err != nil:
			panic(err)
		default:
			fmt.Println(q.UUID, "answered")
			q.Ack()
		}
	}
	fmt.Println(rdb.XLen(ctx, "answers").Val(), "answer in the stream")
	// Output:
	// question-1 answered
	// question-2 is another consumer's now: not answered
	// 1 answer in the stream
}

// The example runs against a redis-server of its own; in your code, the address is where your Redis runs
// (such as "localhost:6379").
var servers redistest.Examples

func TestMain(m *testing.M) {
	code := m.Run()
	servers.Stop()
	os.Exit(code)
}
