package rlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// BenchmarkUncontended: acquire+release of a key nobody else wants, against the physical limit of two bare
// EVALSHA round trips on the same client.
func BenchmarkUncontended(b *testing.B) {
	s := redistest.Start(b)
	for _, par := range []int{1, 32} {
		b.Run("lock/goroutines="+strconv.Itoa(par), func(b *testing.B) {
			l := newLocker(b, s, Config{})
			ctx := context.Background()
			var id atomic.Int64
			runParallel(b, par, func() func() {
				key := "k" + strconv.FormatInt(id.Add(1), 10)
				return func() {
					lease, err := l.Acquire(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := lease.Release(ctx); err != nil {
						b.Error(err)
					}
				}
			})
		})
		b.Run("two-evalsha/goroutines="+strconv.Itoa(par), func(b *testing.B) {
			rdb := s.Client()
			ctx := context.Background()
			script := redis.NewScript(`return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)`)
			script.Load(ctx, rdb)
			var id atomic.Int64
			runParallel(b, par, func() func() {
				key := "bare" + strconv.FormatInt(id.Add(1), 10)
				return func() {
					for range 2 {
						if err := script.EvalSha(ctx, rdb, []string{key}, "f").Err(); err != nil {
							b.Error(err)
						}
					}
				}
			})
		})
	}
}

// runParallel runs b.N calls spread over par goroutines; setup runs once per goroutine.
func runParallel(b *testing.B, par int, setup func() func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range par {
		op := setup()
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				op()
			}
		})
	}
	wg.Wait()
}

// BenchmarkHotKey: 3 lockers (as 3 processes) x 16 goroutines take one key in turn, with some work outside
// the lock between sections. Reports sections/s and the p50/p99 wait for the lock.
func BenchmarkHotKey(b *testing.B) {
	s := redistest.Start(b)
	for _, outside := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("outside=%v", outside), func(b *testing.B) {
			ctx := context.Background()
			var lockers []*Reentrant
			for range 3 {
				lockers = append(lockers, newLocker(b, s, Config{}))
			}
			var next atomic.Int64
			var mu sync.Mutex
			waits := make([]time.Duration, 0, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for _, l := range lockers {
				for range 16 {
					wg.Go(func() {
						local := make([]time.Duration, 0, b.N/48+1)
						for next.Add(1) <= int64(b.N) {
							t0 := time.Now()
							lease, err := l.Acquire(ctx, "hot")
							if err != nil {
								b.Error(err)
								return
							}
							local = append(local, time.Since(t0))
							if err := lease.Release(ctx); err != nil {
								b.Error(err)
							}
							time.Sleep(outside)
						}
						mu.Lock()
						waits = append(waits, local...)
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(waits)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sections/s")
			b.ReportMetric(float64(percentile(waits, 0.50).Microseconds())/1000, "p50-wait-ms")
			b.ReportMetric(float64(percentile(waits, 0.99).Microseconds())/1000, "p99-wait-ms")
		})
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// BenchmarkRedlockUncontended: acquire+release on 5 local masters, one goroutine.
func BenchmarkRedlockUncontended(b *testing.B) {
	servers := redistest.StartN(b, 5)
	l := newRedlock(b, servers, Config{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		lease, err := l.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
