package inventory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// BenchmarkReserve and BenchmarkEvalShaHincrby run the same way against the same kind of server, so
// their ratio is the cost of Reserve's checks and bookkeeping over the cheapest possible script.

func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", stock.MaxStock); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// A constant token: the fence is checked on every call, as under a lock.
			o, err := store.Reserve(ctx, inventory.Order{ID: "o-" + strconv.FormatInt(next.Add(1), 10), SKU: "SKU-1", Quantity: 1}, 1)
			if err != nil || o.Status != order.StatusReserved {
				b.Errorf("reserve: %+v, %v", o, err)
				return
			}
		}
	})
	reportOrderRate(b, 1)
}

// BenchmarkReserveBatch runs like BenchmarkReserve, each operation a batch of size orders; compare their
// orders/s.
func BenchmarkReserveBatch(b *testing.B) {
	for _, size := range []int{1, 8, 32} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) { benchmarkReserveBatch(b, size) })
	}
}

func benchmarkReserveBatch(b *testing.B, size int) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client()
	store := inventory.New(rdb)
	if err := store.SetStock(ctx, "SKU-1", stock.MaxStock); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		batch := make([]inventory.Order, size)
		for pb.Next() {
			for i := range batch {
				batch[i] = inventory.Order{ID: "o-" + strconv.FormatInt(next.Add(1), 10), SKU: "SKU-1", Quantity: 1}
			}
			outs, err := store.ReserveBatch(ctx, batch, 1)
			if err != nil || outs[size-1].Status != order.StatusReserved {
				b.Errorf("reserve batch: %+v, %v", outs, err)
				return
			}
		}
	})
	reportOrderRate(b, size)
}

// reportOrderRate reports orders/s, for operations of ordersPerOp orders each.
func reportOrderRate(b *testing.B, ordersPerOp int) {
	b.ReportMetric(float64(b.N*ordersPerOp)/b.Elapsed().Seconds(), "orders/s")
}

var hincrby = redis.NewScript(`return redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])`)

func BenchmarkEvalShaHincrby(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client()
	keys := []string{"stock:{SKU-1}"}
	if err := hincrby.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := hincrby.Run(ctx, rdb, keys, "available", -1).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserveBatchesElided compares, by the CPU time Redis spends per order (redis-µs/order), commit
// rounds of 100 one-order batches over 200 SKUs (a worker's uniform load) decided without a lock (token
// 0, as the cost bench's minimal ideal decides) and with lock elision (each script checks the lock and the
// fencing counter itself): what elision costs Redis over no lock at all (issue 29's floor).
func BenchmarkReserveBatchesElided(b *testing.B) {
	for _, way := range []string{"unlocked", "elided"} {
		b.Run(way, func(b *testing.B) {
			ctx := context.Background()
			rdb := redistest.Start(b).Client()
			store, fence := inventory.New(rdb), int64(0)
			if way == "elided" {
				store, fence = inventory.New(rdb, inventory.WithLockElision(lockKey, counterKey, time.Hour)), inventory.ElideLock
			}
			for i := range 200 {
				if err := store.SetStock(ctx, "SKU-"+strconv.Itoa(i), stock.MaxStock); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			redistest.ReportCPUPer(b, rdb, b.N, "order", func() {
				for n := 0; n < b.N; {
					batches := make([]inventory.Batch, 0, 100)
					for ; len(batches) < 100 && n < b.N; n++ {
						o := inventory.Order{ID: "o-" + strconv.Itoa(n), SKU: "SKU-" + strconv.Itoa(n%200), Quantity: 1}
						batches = append(batches, inventory.Batch{Ctx: ctx, Orders: []inventory.Order{o}, Fence: fence})
					}
					for _, r := range store.ReserveBatches(ctx, batches) {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
			})
		})
	}
}

// lockKey and counterKey name a SKU's lock and its fencing counter, in the stock's slot as rlock's are.
func lockKey(sku string) string    { return "lock:{" + sku + "}" }
func counterKey(sku string) string { return "lock:{" + sku + "}:fence" }
