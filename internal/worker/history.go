package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/history"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

// The fault tests' recording (FAULT_HISTORY_DIR): every lock acquisition and every stock operation of the
// worker is appended to a file of its own (one per process: a process killed mid-write cannot tear another's
// line) (internal/history), whose checker then proves the run linearizable and
// correctly fenced. Off in production: the recorder is nil and the wrappers are not installed.

// fenceCheckOff is set only in the deliberately broken build (brokenfence.go): writes are sent unfenced
// but recorded with their tokens, as if the store's fencing check were off.
var fenceCheckOff bool

// recordingStore records the invocation of each order's reservation before a batch and its outcome after.
type recordingStore struct {
	*inventory.Store
	rec *history.Recorder
}

func (s recordingStore) ReserveBatch(ctx context.Context, orders []inventory.Order, fence int64) ([]inventory.Outcome, error) {
	// An elided batch (inventory.ElideLock) is invoked without a token; its fresh writes return with the
	// token the script drew, inside a hold of that token acquired and released around the call, so the
	// fencing checks cover them, and a later stale write is refused against them.
	calls := make([]*history.Call, len(orders))
	for i, o := range orders {
		calls[i] = s.rec.Invoke(history.Reserve, o.SKU, o.ID, o.Quantity, max(fence, 0))
	}
	invoked := time.Now()
	outs, err := s.Store.ReserveBatch(ctx, orders, sentFence(fence))
	if err == nil && fence == inventory.ElideLock {
		s.recordElided(orders, outs, invoked)
	}
	for i, call := range calls {
		if err != nil {
			call.Fail(err)
		} else {
			call.Return(outs[i])
		}
	}
	return outs, err
}

// sentFence is the fence a write is sent with: its own, or in the deliberately broken build none, while
// it is recorded with its token (an elided batch still takes its lock).
func sentFence(fence int64) int64 {
	if fenceCheckOff {
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
func (w *Worker) recordHold(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		lease, ok := lockmw.LeaseFrom(msg.Context())
		if !ok || lease.Token() == 0 {
			return h(msg)
		}
		owner, now := w.cfg.Name+":"+msg.UUID, time.Now()
		w.history.Acquired(lease.Key(), owner, lease.Token(), now.Add(-rlock.StatsOf(lease).Waited), now)
		defer func() { w.history.Released(lease.Key(), owner, lease.Token(), time.Now()) }()
		return h(msg)
	}
}

// openHistory opens the process's history file when FAULT_HISTORY_DIR names a directory.
func (w *Worker) openHistory() (err error) {
	if dir := w.cfg.FaultHistoryDir; dir != "" {
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", w.cfg.Name, os.Getpid()))
		w.history, err = history.Open(path, w.cfg.Name)
	}
	return err
}
