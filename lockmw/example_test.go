package lockmw_test

import (
	"fmt"
	"os"
	"testing"

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
