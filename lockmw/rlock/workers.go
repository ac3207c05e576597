package rlock

import "time"

// workerIdle is how long a kept goroutine waits for another call before it exits.
const workerIdle = 10 * time.Second

// workers runs calls on goroutines kept between calls. A Redlock call fans out to every master, and a
// goroutine started for each would grow its stack again through go-redis's deep call path on every call:
// copying stacks took a fifth of the client's CPU in BenchmarkRedlockUncontended (bench/internal/harness).
// A kept goroutine grows its stack once.
type workers struct{ calls chan func() }

func newWorkers() workers { return workers{calls: make(chan func())} }

// run runs f on an idle kept goroutine, or on a new one when none is idle.
func (w workers) run(f func()) {
	select {
	case w.calls <- f:
	default:
		go w.work(f)
	}
}

// work runs f, then the calls given to it, until none comes for workerIdle.
func (w workers) work(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-w.calls:
		case <-idle.C:
			return
		}
	}
}
