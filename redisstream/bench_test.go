package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// BenchmarkFetch compares, by the CPU time Redis spends per entry (redis-µs/entry), reading a group's new
// entries 100 at a time with fetch.lua (which checks each entry's size, so that no worker is ever handed an
// oversized one) and with a bare XREADGROUP, which hands over whatever is there. The difference is what
// the size limit costs Redis: the entries are turned into Lua values and back (issue 29's floor).
func BenchmarkFetch(b *testing.B) {
	for _, way := range []string{"fetch.lua", "XREADGROUP"} {
		b.Run(way, func(b *testing.B) {
			ctx := context.Background()
			rdb := redistest.Start(b).Client()
			if err := rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "0").Err(); err != nil {
				b.Fatal(err)
			}
			addOrders(b, rdb, b.N)
			if err := fetchScript.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			redistest.ReportCPUPer(b, rdb, b.N, "entry", func() {
				for read := 0; read < b.N; read += 100 {
					var err error
					if way == "XREADGROUP" {
						err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "c",
							Streams: []string{"orders", ">"}, Count: 100}).Err()
					} else {
						err = fetchScript.EvalSha(ctx, rdb, []string{"orders", "orders:poison", FetchedKey("orders", "inventory", "c", "read")},
							"read", "inventory", "c", DefaultMaxEntryBytes, 1000, 100, 0, "0-0", "req-"+strconv.Itoa(read), 30000).Err()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// addOrders adds n order entries as the producer writes them (redisstream's fields, a trace context).
func addOrders(b *testing.B, rdb *redis.Client, n int) {
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{
			"_watermill_message_uuid", fmt.Sprintf("0198c4a2-8f1e-7c3b-9a7e-%012d", i),
			"payload", fmt.Sprintf(`{"order_id":"o-%d","sku":"SKU-%d","quantity":1}`, i, i%200),
			"metadata", `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`}})
		if pipe.Len() == 1000 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// chanSubscriber hands out n messages, at most inFlight unacked at once, each waited for by a goroutine of
// its own until acked (as reader does), and closes done once all are acked.
type chanSubscriber struct {
	n, inFlight int
	done        chan struct{}
}

func (s *chanSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		slots, acked := make(chan struct{}, s.inFlight), make(chan struct{}, s.n)
		for range s.n {
			slots <- struct{}{}
			msg := message.NewMessage("1-0", []byte(`{"order_id":"o","sku":"SKU-1","quantity":1}`))
			msg.SetContext(ctx)
			out <- msg
			go func() {
				<-msg.Acked()
				<-slots
				acked <- struct{}{}
			}()
		}
		for range s.n {
			<-acked
		}
		close(s.done)
		<-ctx.Done()
	}()
	return out, nil
}

func (s *chanSubscriber) Close() error { return nil }

// BenchmarkRouterFloor is what Watermill's Router costs per message on its own: messages handed over from
// memory (no Redis), a handler that does nothing, an ack waited for by a goroutine per message. It is the
// floor under the worker's CPU per order in the cost bench that keeping the Router (the design) sets.
func BenchmarkRouterFloor(b *testing.B) {
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	sub := &chanSubscriber{n: b.N, inFlight: readerMaxInFlight, done: make(chan struct{})}
	router.AddConsumerHandler("h", "orders", sub, func(*message.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	go func() { _ = router.Run(ctx) }()
	<-sub.done
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	_ = router.Close()
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAnswers compares, by the CPU time Redis spends per order (redis-µs/order), publishing the outcome
// events of rounds of 50 orders as answers (answer.lua: only those still pending to the consumer) and with a
// MULTI of the same XADDs, which publishes whatever it is given.
func BenchmarkAnswers(b *testing.B) {
	const round = 50
	for _, way := range []string{"answer.lua", "MULTI"} {
		b.Run(way, func(b *testing.B) {
			ctx := context.Background()
			rdb := redistest.Start(b).Client()
			if err := rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "0").Err(); err != nil {
				b.Fatal(err)
			}
			n := (b.N + round - 1) / round * round
			addOrders(b, rdb, n)
			entries, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "c",
				Streams: []string{"orders", ">"}, Count: int64(n)}).Result()
			if err != nil {
				b.Fatal(err)
			}
			ids := entries[0].Messages
			pub, err := NewPublisher(PublisherConfig{Client: rdb, ConsumerGroup: "inventory", Consumer: "c", DefaultMaxlen: 1000000}, nil)
			if err != nil {
				b.Fatal(err)
			}
			metadata := `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`
			b.ResetTimer()
			redistest.ReportCPUPer(b, rdb, n, "order", func() {
				for start := 0; start < n; start += round {
					pipe := rdb.TxPipeline()
					var answers []*message.Message
					for _, e := range ids[start : start+round] {
						payload := `{"order_id":"` + e.ID + `","sku":"SKU-1","quantity":1,"status":"reserved","available_after":41,"fence":7}`
						if way == "MULTI" {
							pipe.XAdd(ctx, &redis.XAddArgs{Stream: "order-results", MaxLen: 1000000, Approx: true,
								Values: []any{"_watermill_message_uuid", watermill.NewUUID(), "metadata", metadata, "payload", payload}})
							continue
						}
						msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
						msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
						question := message.NewMessage(e.ID, nil)
						question.Metadata.Set(MetadataStream, "orders")
						question.Metadata.Set(MetadataEntryID, e.ID)
						Answer(msg, question)
						answers = append(answers, msg)
					}
					if way != "MULTI" {
						if err := pub.Publish("order-results", answers...); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
