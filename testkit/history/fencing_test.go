package history

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/stockflow/stockflow/inventory"
)

// pausedHolder plays issue #17's scenario on a store with or without its fence check: A takes the lock
// (token 1) and pauses past its lease; B takes it (token 2) but has not written yet; A resumes and
// writes with token 1; then B writes.
func pausedHolder(t *testing.T, fenced bool) Report {
	s := newScript(t)
	store := newFakeStore(map[string]int64{"SKU-1": 5}, fenced)
	a, b := s.recorder("A"), s.recorder("B")
	tokenA := s.acquire(a, store, "SKU-1")
	tokenB := s.acquire(b, store, "SKU-1")
	if _, err := doReserve(a, store, inventory.Order{ID: "o-a", SKU: "SKU-1", Quantity: 1}, tokenA); fenced && err == nil {
		t.Fatal("the fenced store accepted the stale write")
	}
	if _, err := doReserve(b, store, inventory.Order{ID: "o-b", SKU: "SKU-1", Quantity: 1}, tokenB); err != nil {
		t.Fatal(err)
	}
	s.release(b, "SKU-1", tokenB)
	return s.check(map[string]int64{"SKU-1": 5})
}

func TestAStaleHolderWritingBeforeTheNewOneFailsTheFencingCheck(t *testing.T) {
	r := pausedHolder(t, false)
	if len(r.Violations) != 1 || r.OK() {
		t.Fatalf("want one violation, got\n%s", r)
	}
	v := r.Violations[0]
	if v.Rule != StaleToken || v.Write.Worker != "A" || v.Write.Token != 1 || v.Newer.Worker != "B" || v.Newer.Token != 2 {
		t.Fatalf("want A's write with token 1 against B's token 2, got %+v", v)
	}
	// The stock is right either way: the linearizability check alone cannot see this.
	if got := skuResult(t, r, "SKU-1"); got.Result != porcupine.Ok {
		t.Fatalf("want the stock linearizable, got %s", got.Result)
	}
	for _, want := range []string{"SKU-1: stale token", "A reserve", "token 1", "B acquired token 2"} {
		if !strings.Contains(r.String(), want) {
			t.Errorf("the report should say %q:\n%s", want, r)
		}
	}
}

func TestAStaleHolderRefusedPassesTheFencingCheck(t *testing.T) {
	r := pausedHolder(t, true)
	if !r.OK() {
		t.Fatalf("want the fenced history to pass, got\n%s", r)
	}
	if got := skuResult(t, r, "SKU-1"); got.Refused != 1 {
		t.Fatalf("want A's write refused, got %+v", got)
	}
}

func TestWritesMustBeInTokenOrder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		write      func(s *script, a, b *Recorder)
		violations int
	}{
		{"a lower token after a higher one returned", func(_ *script, a, b *Recorder) {
			a.Invoke(Reserve, "SKU-1", "o-1", 1, 2).Return(reserved(1, 4))
			b.Invoke(Reserve, "SKU-1", "o-2", 1, 1).Return(reserved(1, 3))
		}, 1},
		{"increasing tokens", func(_ *script, a, b *Recorder) {
			a.Invoke(Reserve, "SKU-1", "o-1", 1, 1).Return(reserved(1, 4))
			b.Invoke(Reserve, "SKU-1", "o-2", 1, 2).Return(reserved(1, 3))
		}, 0},
		{"an unfenced write after a fenced one", func(_ *script, a, b *Recorder) {
			a.Invoke(Reserve, "SKU-1", "o-1", 1, 2).Return(reserved(1, 4))
			b.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Return(reserved(1, 3))
		}, 0},
		{"overlapping writes out of order", func(_ *script, a, b *Recorder) {
			ca := a.Invoke(Reserve, "SKU-1", "o-1", 1, 2)
			cb := b.Invoke(Reserve, "SKU-1", "o-2", 1, 1)
			ca.Return(reserved(1, 4))
			cb.Return(reserved(1, 3))
		}, 0},
		{"a replay of a lower token", func(_ *script, a, b *Recorder) {
			a.Invoke(Reserve, "SKU-1", "o-1", 1, 1).Return(reserved(1, 4))
			a.Invoke(Reserve, "SKU-1", "o-2", 1, 2).Return(reserved(1, 3))
			b.Invoke(Reserve, "SKU-1", "o-1", 1, 1).Return(replay(reserved(1, 4)))
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			a, b := s.recorder("A"), s.recorder("B")
			tc.write(s, a, b)
			r := s.check(map[string]int64{"SKU-1": 5})
			if len(r.Violations) != tc.violations {
				t.Fatalf("want %d violations, got\n%s", tc.violations, r)
			}
			if tc.violations > 0 && (r.Violations[0].Rule != TokenOrder || r.Violations[0].Prior.Token != 2) {
				t.Fatalf("want a token order violation against the write with token 2, got %+v", r.Violations[0])
			}
		})
	}
}

// A write is stale only against tokens whose acquisition had returned before the write was invoked: a
// token being acquired while the write is in flight does not count.
func TestATokenCountsFromItsAcquisitionOn(t *testing.T) {
	s := newScript(t)
	a, b := s.recorder("A"), s.recorder("B")
	call := a.Invoke(Reserve, "SKU-1", "o-1", 1, 1)
	b.Acquired("SKU-1", "owner-b", 2, s.clock.now(), s.clock.now())
	call.Return(reserved(1, 4))
	if r := s.check(map[string]int64{"SKU-1": 5}); !r.OK() {
		t.Fatalf("want no violation, got\n%s", r)
	}
}
