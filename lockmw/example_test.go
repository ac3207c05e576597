package lockmw_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func ExampleMiddleware() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	// Lock each message's SKU (here its payload) around the handler. In a Watermill router:
	// router.AddMiddleware(mw.Middleware), or per handler.
	mw := &lockmw.Middleware{Locker: locker, Key: func(msg *message.Message) (string, error) {
		return string(msg.Payload), nil
	}}
	handler := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		lease, _ := lockmw.LeaseFrom(msg.Context()) // msg.Context() ends if the lock is lost
		fmt.Println(msg.UUID, "runs under the lock of", lease.Key(), "with token", lease.Token())
		return nil, nil
	})
	for _, id := range []string{"order-1", "order-2"} {
		if _, err := handler(message.NewMessage(id, []byte("SKU-1"))); err != nil {
			panic(err)
		}
	}
	// Output:
	// order-1 runs under the lock of SKU-1 with token 1
	// order-2 runs under the lock of SKU-1 with token 2
}

func ExampleBatcher() {
	// The messages of one key that arrive while another message of it is handled wait in the Batcher and
	// are handled in the first one's batches: it alone goes on to the lock middleware and the handler.
	b := &lockmw.Batcher{}
	release := make(chan struct{})
	handler := b.Middleware(func(leader *message.Message) ([]*message.Message, error) {
		<-release // here the lock middleware would wait for the lock
		batch := b.Take("SKU-1", 64)
		for _, q := range batch {
			fmt.Println(leader.UUID, "handles", q.Msg.UUID)
		}
		b.Done("SKU-1", leader, batch, nil) // each follower returns nil
		return nil, nil
	})
	done := make(chan struct{})
	for i, id := range []string{"order-1", "order-2", "order-3"} {
		msg := message.NewMessage(id, nil)
		msg.SetContext(lockmw.WithKeys(context.Background(), []string{"SKU-1"}, lockmw.MayBatch))
		go func() {
			if _, err := handler(msg); err != nil {
				panic(err)
			}
			done <- struct{}{}
		}()
		for deadline := time.Now().Add(5 * time.Second); b.Waiting("SKU-1") <= i; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) { // each joins after the one before it
				panic("the message did not join within 5 s")
			}
		}
	}
	close(release)
	for range 3 {
		<-done
	}
	// Output:
	// order-1 handles order-1
	// order-1 handles order-2
	// order-1 handles order-3
}

// The example runs against a redis-server of its own; in your code, the address is where your Redis runs
// (such as "localhost:6379").
var servers redistest.Examples

func TestMain(m *testing.M) {
	code := m.Run()
	servers.Stop()
	os.Exit(code)
}

// redisAddr is the address of an empty redis-server.
func redisAddr() string { return servers.Addrs(1)[0] }
