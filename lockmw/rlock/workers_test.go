package rlock

import (
	"sync"
	"testing"
	"time"
)

func idleWorkers(w *workers) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

// After a burst, a steady load of one call at a time needs one goroutine: as the goroutine idle last takes
// each call, the others the burst left exit after idleFor. (Taken in turn, each would get a call every 50
// calls, well within idleFor, and all would stay.)
func TestWorkersShrinkUnderASteadyLoad(t *testing.T) {
	w := newWorkers(200 * time.Millisecond)
	const burst = 50
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(burst)
	for range burst {
		w.run(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitFor(t, "the burst's goroutines idle", func() bool { return idleWorkers(w) == burst })
	start := time.Now()
	for idleWorkers(w) > 2 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d goroutines still kept after %v of one call at a time (idle for 200ms exits)", idleWorkers(w), time.Since(start))
		}
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
		time.Sleep(time.Millisecond)
	}
}

// A call given to a goroutine as it times out still runs.
func TestWorkersRunEveryCall(t *testing.T) {
	w := newWorkers(time.Millisecond)
	const calls = 2000
	var wg sync.WaitGroup
	wg.Add(calls)
	for i := range calls {
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // let idle goroutines time out between calls
		}
		w.run(wg.Done)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("calls given to kept goroutines never ran")
	}
}
