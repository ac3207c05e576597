package harness

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// BenchmarkUncontended is comparison 1 as a Go benchmark, to profile one contender at a time:
//
//	go test -run '^$' -bench 'Uncontended/stockflow/g=32' -cpuprofile cpu.out ./internal/harness
//	go tool pprof -top cpu.out
func BenchmarkUncontended(b *testing.B) {
	s := redistest.Start(b)
	for _, c := range []contender{stockflowReentrant(), redsyncDefaults(), redislockRetry(0), twoEvalSha()} {
		for _, par := range []int{1, 32} {
			b.Run(c.name+"/g="+strconv.Itoa(par), func(b *testing.B) {
				lockers, err := newLockers(c, []string{s.Addr}, 1)
				if err != nil {
					b.Fatal(err)
				}
				defer closeLockers(lockers)
				ctx := context.Background()
				var next, id atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range par {
					key := "k" + strconv.FormatInt(id.Add(1), 10)
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							unlock, err := lockers[0].lock(ctx, key)
							if err != nil {
								b.Error(err)
								return
							}
							if err := unlock(ctx); err != nil {
								b.Error(err)
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkRedlockUncontended is comparison 3a as a Go benchmark.
func BenchmarkRedlockUncontended(b *testing.B) {
	servers := redistest.StartN(b, 5)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	for _, c := range []contender{stockflowRedlock(), redsyncDefaults()} {
		b.Run(c.name, func(b *testing.B) {
			lockers, err := newLockers(c, addrs, 1)
			if err != nil {
				b.Fatal(err)
			}
			defer closeLockers(lockers)
			ctx := context.Background()
			for b.Loop() {
				unlock, err := lockers[0].lock(ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				if err := unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
