package stream

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
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
						err = fetchScript.EvalSha(ctx, rdb, []string{"orders", "orders:poison"},
							"read", "inventory", "c", MaxEntryBytes, 1000, 100).Err()
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
