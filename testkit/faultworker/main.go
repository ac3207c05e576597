// Command faultworker is the worker of the fault tests (internal/e2e): cmd/worker plus fault hooks that the
// production binary does not link. Its extra settings:
//
//	FAULT_DELAY_WRITE   hold each stock write back this long after the lock was taken, then send it even if
//	                    the lease was lost meanwhile, as a write stuck in a stalled network or a paused
//	                    process would be: the fencing token must refuse it (lock elision off)
//	FAULT_HISTORY_DIR   append every lock acquisition and stock operation to a file of this process in this
//	                    directory (JSON lines) for the history checker (testkit/history)
//	FAULT_BROKEN_FENCE  send stock writes unfenced but record them with their tokens: the deliberately broken
//	                    worker whose history the checker must refuse
//	FAULT_EXIT_AFTER_ROUND  exit at once (status 137, as kill -9) when the N-th round of stock scripts has
//	                    returned, before its outcome transaction: a worker killed between the pipeline and
//	                    the ack
package main

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/inventory"
)

func main() {
	os.Exit(worker.Main("faultworker", os.Args[1:], faults))
}

// faults defines the fault settings and turns them into the worker's fault hooks.
func faults(set *config.Set) func(worker.Config, *worker.Options) error {
	var delay time.Duration
	var dir string
	var broken bool
	var exitAfter int
	set.Duration(&delay, "FAULT_DELAY_WRITE", 0, "hold each stock write this long after taking the lock, then send it even if the lease was lost")
	set.String(&dir, "FAULT_HISTORY_DIR", "", "append every lock acquisition and stock operation to a file of this process in this directory")
	set.Bool(&broken, "FAULT_BROKEN_FENCE", "send stock writes unfenced (the history checker's own test)")
	set.Int(&exitAfter, "FAULT_EXIT_AFTER_ROUND", 0, "exit (137) when the n-th round of stock scripts returned, before its outcomes are published")
	var stopAfter int
	set.Int(&stopAfter, "FAULT_STOP_AFTER_ROUND", 0, "stop (SIGSTOP to itself) when the n-th round of stock scripts returned, before its outcomes are published; SIGCONT resumes it")
	return func(cfg worker.Config, opts *worker.Options) error {
		f := &worker.Faults{NoElision: delay > 0}
		if exitAfter > 0 || stopAfter > 0 {
			f.Store = func(s handlers.Store) handlers.Store {
				return &exitingStore{Store: s, after: int64(max(exitAfter, stopAfter)), stop: stopAfter > 0}
			}
		}
		var wrap []message.HandlerMiddleware
		if dir != "" {
			rec, err := openHistory(dir, cfg.Name)
			if err != nil {
				return err
			}
			inner := f.Store
			f.Store = func(s handlers.Store) handlers.Store {
				if inner != nil {
					s = inner(s)
				}
				return recordingStore{s, rec, broken}
			}
			wrap = append(wrap, recordHold(rec, cfg.Name))
		}
		if delay > 0 {
			wrap = append(wrap, delayWrite(delay))
		}
		f.Handler = func(h message.HandlerFunc) message.HandlerFunc {
			for i := len(wrap) - 1; i >= 0; i-- {
				h = wrap[i](h)
			}
			return h
		}
		opts.Faults = f
		return nil
	}
}

// delayWrite holds each stock write back d after the lock was taken and then lets it run even if the lease
// was lost meanwhile.
func delayWrite(d time.Duration) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			time.Sleep(d)
			orig := msg.Context()
			msg.SetContext(context.WithoutCancel(orig))
			defer msg.SetContext(orig)
			return h(msg)
		}
	}
}

// exitingStore exits the process as kill -9 would once its after-th round of stock scripts has returned
// (the reservations are in Redis, their outcome events and acks are not), or with stop stops it there as a
// long pause would (SIGSTOP: every goroutine, the keep-alive of its entries included), until SIGCONT.
type exitingStore struct {
	handlers.Store
	after  int64
	stop   bool
	rounds atomic.Int64
}

func (s *exitingStore) ReserveBatches(ctx context.Context, batches []inventory.Batch) []inventory.BatchResult {
	results := s.Store.ReserveBatches(ctx, batches)
	if s.rounds.Add(1) == s.after {
		if !s.stop {
			os.Exit(137)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	return results
}
