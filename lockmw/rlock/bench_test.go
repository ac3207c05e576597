package rlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// BenchmarkUncontended: acquire+release of a key nobody else wants, against the physical limit of two bare
// EVALSHA round trips on the same client. redis-µs/op is the server's CPU time per cycle (INFO's
// used_cpu_user + used_cpu_sys), which depends little on the client's machine sharing the CPU.
func BenchmarkUncontended(b *testing.B) {
	s := redistest.Start(b)
	for _, par := range []int{1, 32} {
		b.Run("lock/goroutines="+strconv.Itoa(par), func(b *testing.B) {
			l := newLocker(b, s, Config{})
			ctx := context.Background()
			var id atomic.Int64
			runParallel(b, s, par, func() func() {
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
			runParallel(b, s, par, func() func() {
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

// runParallel runs b.N calls spread over par goroutines against s; setup runs once per goroutine.
func runParallel(b *testing.B, s *redistest.Server, par int, setup func() func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	ops := make([]func(), par)
	for i := range ops {
		ops[i] = setup()
	}
	before := serverCPU(b, s)
	b.ResetTimer()
	for _, op := range ops {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				op()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((serverCPU(b, s)-before).Microseconds())/float64(b.N), "redis-µs/op")
}

// serverCPU is the CPU time s has used (user and system).
func serverCPU(b *testing.B, s *redistest.Server) time.Duration {
	info, err := s.Client().Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var used float64
	for _, line := range strings.Split(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			v, _ := strconv.ParseFloat(value, 64)
			used += v
		}
	}
	return time.Duration(used * float64(time.Second))
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
