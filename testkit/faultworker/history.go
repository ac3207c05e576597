package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/history"
)

// The fault tests' recording (FAULT_HISTORY_DIR): every lock acquisition and every stock operation of the
// worker is appended to a file of its own (one per process: a process killed mid-write cannot tear another's
// line) (testkit/history), whose checker then proves the run linearizable and correctly fenced.

// recordingStore records the invocation of each order's reservation before a batch and its outcome after.
// With fenceCheckOff (FAULT_BROKEN_FENCE, the history checker's own test) writes are sent unfenced but
// recorded with their tokens, as if the store's fencing check were off.
type recordingStore struct {
	handlers.Store
	rec           *history.Recorder
	fenceCheckOff bool
}

func (s recordingStore) ReserveBatches(ctx context.Context, batches []inventory.Batch) []inventory.BatchResult {
	// An elided batch (inventory.ElideLock) is invoked without a token; its fresh writes return with the
	// token the script drew, inside a hold of that token acquired and released around the call, so the
	// fencing checks cover them, and a later stale write is refused against them.
	calls := make([][]*history.Call, len(batches))
	sent := make([]inventory.Batch, len(batches))
	for i, b := range batches {
		for _, o := range b.Orders {
			calls[i] = append(calls[i], s.rec.Invoke(history.Reserve, o.SKU, o.ID, o.Quantity, max(b.Fence, 0)))
		}
		sent[i] = b
		sent[i].Fence = s.sentFence(b.Fence)
	}
	invoked := time.Now()
	results := s.Store.ReserveBatches(ctx, sent)
	for i, r := range results {
		if r.Err == nil && batches[i].Fence == inventory.ElideLock {
			s.recordElided(batches[i].Orders, r.Outcomes, invoked)
		}
		for k, call := range calls[i] {
			if r.Err != nil {
				call.Fail(r.Err)
			} else {
				call.Return(r.Outcomes[k])
			}
		}
	}
	return results
}

// sentFence is the fence a write is sent with: its own, or in the deliberately broken worker none, while
// it is recorded with its token (an elided batch still takes its lock).
func (s recordingStore) sentFence(fence int64) int64 {
	if s.fenceCheckOff {
		return min(fence, 0)
	}
	return fence
}

// recordElided records the hold of an elided batch that wrote: the token of its fresh outcomes.
func (s recordingStore) recordElided(orders []inventory.Order, outs []inventory.Outcome, invoked time.Time) {
	i := slices.IndexFunc(outs, func(out inventory.Outcome) bool { return !out.Replayed })
	if i < 0 {
		return
	}
	owner, now := "elided:"+orders[i].ID, time.Now()
	s.rec.Acquired(orders[i].SKU, owner, outs[i].Fence, invoked, now)
	s.rec.Released(orders[i].SKU, owner, outs[i].Fence, now)
}

var _ handlers.Store = recordingStore{}

// recordHold records the message's lock hold: acquired when the handler starts (with Redlock after the
// stock's fence was raised, so the time is when the store knows the token), released when it returns.
func recordHold(rec *history.Recorder, worker string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			lease, ok := lockmw.LeaseFrom(msg.Context())
			if !ok || lease.Token() == 0 {
				return h(msg)
			}
			owner, now := worker+":"+msg.UUID, time.Now()
			rec.Acquired(lease.Key(), owner, lease.Token(), now.Add(-rlock.StatsOf(lease).Waited), now)
			defer func() { rec.Released(lease.Key(), owner, lease.Token(), time.Now()) }()
			return h(msg)
		}
	}
}

// openHistory opens the process's history file in dir.
func openHistory(dir, worker string) (*history.Recorder, error) {
	return history.Open(filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", worker, os.Getpid())), worker)
}
