package rlock

import (
	"slices"
	"sync"
	"time"
)

// workerIdle is how long a kept goroutine waits for another call before it exits.
const workerIdle = 10 * time.Second

// workers runs calls on goroutines kept between calls. A Redlock call fans out to every master, and a
// goroutine started for each would grow its stack again through go-redis's deep call path on every call:
// copying stacks took a fifth of the client's CPU in BenchmarkRedlockUncontended (bench/internal/harness).
// A kept goroutine grows its stack once.
//
// The goroutine that became idle last takes the next call, so under a steady load the goroutines a burst
// left beyond what the load needs stay idle, and exit after idleFor.
type workers struct {
	idleFor time.Duration

	mu   sync.Mutex
	idle []chan func() // the inboxes of the idle goroutines, the one idle last at the end
}

func newWorkers(idleFor time.Duration) *workers { return &workers{idleFor: idleFor} }

// run runs f on the kept goroutine that became idle last, or on a new one when none is idle.
func (w *workers) run(f func()) {
	w.mu.Lock()
	n := len(w.idle)
	if n == 0 {
		w.mu.Unlock()
		go w.work(f)
		return
	}
	inbox := w.idle[n-1]
	w.idle = w.idle[:n-1]
	w.mu.Unlock()
	inbox <- f // buffered: its goroutine waits for it
}

// work runs f, then the calls given to it, until none comes for idleFor.
func (w *workers) work(f func()) {
	inbox := make(chan func(), 1)
	timer := time.NewTimer(w.idleFor)
	defer timer.Stop()
	for {
		f()
		w.mu.Lock()
		w.idle = append(w.idle, inbox)
		w.mu.Unlock()
		timer.Reset(w.idleFor)
		select {
		case f = <-inbox:
		case <-timer.C:
			if w.retire(inbox) {
				return
			}
			f = <-inbox // a call took this goroutine as it timed out
		}
	}
}

// retire takes the idle goroutine of inbox off the idle list; false when a call took it meanwhile.
func (w *workers) retire(inbox chan func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.idle, inbox)
	if i < 0 {
		return false
	}
	w.idle = slices.Delete(w.idle, i, i+1)
	return true
}
