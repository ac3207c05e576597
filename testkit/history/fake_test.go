package history

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// fakeStore is an in-memory stock with the semantics of reserve.lua and release.lua and of a lock whose
// fencing counter the store compares with (inventory.WithFenceCounter): the producer of correct and
// broken histories without Redis. It is written independently of the checker's model on purpose.
type fakeStore struct {
	mu       sync.Mutex
	stock    map[string]*fakeStock
	tokens   map[string]int64 // the lock's fencing counter per SKU
	outcomes map[[2]string]inventory.Outcome
	// fenced refuses stale tokens, as the real store does; false is the broken variant.
	fenced bool
}

type fakeStock struct{ available, reserved, fence int64 }

func newFakeStore(initial map[string]int64, fenced bool) *fakeStore {
	s := &fakeStore{stock: make(map[string]*fakeStock), tokens: make(map[string]int64),
		outcomes: make(map[[2]string]inventory.Outcome), fenced: fenced}
	for sku, n := range initial {
		s.stock[sku] = &fakeStock{available: n}
	}
	return s
}

// issue hands out the next fencing token of sku's lock.
func (s *fakeStore) issue(sku string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[sku]++
	return s.tokens[sku]
}

func (s *fakeStore) stale(sku string, token int64) error {
	st := s.stock[sku]
	if !s.fenced || token == 0 {
		return nil
	}
	if st != nil && token < st.fence || token < s.tokens[sku] {
		return &inventory.StaleFenceError{Op: "reserve", SKU: sku, Token: token, Stored: s.tokens[sku]}
	}
	return nil
}

func (s *fakeStore) reserve(o inventory.Order, token int64) (inventory.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, ok := s.outcomes[[2]string{o.SKU, o.ID}]; ok {
		out.Replayed = true
		return out, nil
	}
	if err := s.stale(o.SKU, token); err != nil {
		return inventory.Outcome{}, err
	}
	out := inventory.Outcome{OrderID: o.ID, SKU: o.SKU, Quantity: o.Quantity, Status: order.StatusRejected,
		Reason: order.ReasonUnknownSKU, Fence: token}
	if st := s.stock[o.SKU]; st != nil {
		out.Reason, out.AvailableAfter = order.ReasonInsufficientStock, st.available
		if st.available >= o.Quantity {
			st.available -= o.Quantity
			st.reserved += o.Quantity
			out.Status, out.Reason, out.AvailableAfter = order.StatusReserved, "", st.available
		}
		st.fence = max(st.fence, token)
	}
	s.outcomes[[2]string{o.SKU, o.ID}] = out
	return out, nil
}

func (s *fakeStore) release(orderID, sku string, token int64) (inventory.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, ok := s.outcomes[[2]string{sku, orderID}]
	switch {
	case ok && out.Status == order.StatusReleased:
		out.Replayed = true
		return out, nil
	case !ok || out.Status != order.StatusReserved:
		return inventory.Outcome{}, inventory.ErrNotReserved
	}
	if err := s.stale(sku, token); err != nil {
		return inventory.Outcome{}, err
	}
	st := s.stock[sku]
	st.available += out.Quantity
	st.reserved -= out.Quantity
	st.fence = max(st.fence, token)
	out.Status, out.AvailableAfter, out.Fence = order.StatusReleased, st.available, token
	s.outcomes[[2]string{sku, orderID}] = out
	return out, nil
}

// doReserve runs a reserve on s and records it with rec the way a worker does.
func doReserve(rec *Recorder, s *fakeStore, o inventory.Order, token int64) (inventory.Outcome, error) {
	call := rec.Invoke(Reserve, o.SKU, o.ID, o.Quantity, token)
	out, err := s.reserve(o, token)
	if err != nil {
		call.Fail(err)
		return out, err
	}
	call.Return(out)
	return out, nil
}

func doRelease(rec *Recorder, s *fakeStore, orderID, sku string, token int64) {
	call := rec.Invoke(Release, sku, orderID, 0, token)
	if out, err := s.release(orderID, sku, token); err != nil {
		call.Fail(err)
	} else {
		call.Return(out)
	}
}

// fakeClock is a shared clock for scripted histories: every reading is 1 ms after the previous one, so
// the order of calls is the order of times.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// script records scripted histories: recorders on files in one directory and one fake clock.
type script struct {
	t     testing.TB
	dir   string
	clock *fakeClock
	paths []string
}

func newScript(t testing.TB) *script {
	return &script{t: t, dir: t.TempDir(), clock: newFakeClock()}
}

// recorder opens a recorder for worker on its own file, closed (and checked) at the end of the test.
func (s *script) recorder(worker string) *Recorder {
	path := filepath.Join(s.dir, worker+".jsonl")
	rec, err := Open(path, worker)
	if err != nil {
		s.t.Fatal(err)
	}
	rec.now = s.clock.now
	s.paths = append(s.paths, path)
	s.t.Cleanup(func() {
		if err := rec.Close(); err != nil {
			s.t.Error(err)
		}
	})
	return rec
}

// acquire records an acquisition of sku by rec's worker with the next token of store's lock.
func (s *script) acquire(rec *Recorder, store *fakeStore, sku string) int64 {
	invoked := s.clock.now()
	token := store.issue(sku)
	rec.Acquired(sku, rec.worker+"-owner", token, invoked, s.clock.now())
	return token
}

func (s *script) release(rec *Recorder, sku string, token int64) {
	rec.Released(sku, rec.worker+"-owner", token, s.clock.now())
}

// check loads what was recorded and checks it.
func (s *script) check(initial map[string]int64) Report {
	s.t.Helper()
	h, err := Load(s.paths...)
	if err != nil {
		s.t.Fatal(err)
	}
	return Check(h, initial, 10*time.Second)
}

// outcome is a store answer typed out in a test.
func outcome(status order.Status, reason order.Reason, quantity, after int64, replayed bool) inventory.Outcome {
	return inventory.Outcome{Status: status, Reason: reason, Quantity: quantity, AvailableAfter: after, Replayed: replayed}
}

func reserved(quantity, after int64) inventory.Outcome {
	return outcome(order.StatusReserved, "", quantity, after, false)
}

func rejected(quantity, after int64) inventory.Outcome {
	return outcome(order.StatusRejected, order.ReasonInsufficientStock, quantity, after, false)
}

func replay(o inventory.Outcome) inventory.Outcome {
	o.Replayed = true
	return o
}
