package history

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// skuResult returns the linearizability result of sku in r.
func skuResult(t *testing.T, r Report, sku string) SKUReport {
	t.Helper()
	for _, s := range r.SKUs {
		if s.SKU == sku {
			return s
		}
	}
	t.Fatalf("no result for %s in\n%s", sku, r)
	return SKUReport{}
}

func TestConcurrentWorkersAgainstACorrectStorePass(t *testing.T) {
	dir := t.TempDir()
	initial := map[string]int64{"SKU-0": 400, "SKU-1": 30, "SKU-2": 0}
	store := newFakeStore(initial, true)
	locks := map[string]*sync.Mutex{"SKU-0": {}, "SKU-1": {}, "SKU-2": {}, "SKU-X": {}}
	// w0 and w1 share a file, as processes may; w2 and w3 have their own.
	files := []string{"shared.jsonl", "shared.jsonl", "w2.jsonl", "w3.jsonl"}
	var wg sync.WaitGroup
	for w, file := range files {
		rec, err := Open(filepath.Join(dir, file), fmt.Sprintf("w%d", w))
		if err != nil {
			t.Fatal(err)
		}
		for c := range 4 {
			wg.Go(func() {
				name := fmt.Sprintf("w%d.%d", w, c)
				runWorker(rec, store, locks, rand.New(rand.NewPCG(uint64(w), uint64(c))), name)
			})
		}
		t.Cleanup(func() {
			if err := rec.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	paths := []string{filepath.Join(dir, "shared.jsonl"), filepath.Join(dir, "w2.jsonl"), filepath.Join(dir, "w3.jsonl")}
	r := Verify(t, paths, initial)
	if len(r.SKUs) != 4 || r.Ops != 4*4*60 {
		t.Fatalf("want 4 SKUs and %d operations checked, got\n%s", 4*4*60, r)
	}
	h, _ := Load(paths...)
	var replays, releases int
	for _, op := range h.Ops {
		if op.Result.Replayed {
			replays++
		}
		if op.Kind == Release && op.Failure == "" {
			releases++
		}
	}
	if replays == 0 || releases == 0 {
		t.Fatalf("the history should hold redeliveries and releases: %d replays, %d releases", replays, releases)
	}
}

// runWorker runs 60 operations on random SKUs: new orders, redeliveries of orders seen before and
// releases. Half of the consumers take the SKU's lock and fence their writes; the others write unfenced
// and unlocked, so that operations overlap in time.
func runWorker(rec *Recorder, store *fakeStore, locks map[string]*sync.Mutex, rng *rand.Rand, name string) {
	skus := []string{"SKU-0", "SKU-0", "SKU-1", "SKU-2", "SKU-X"}
	locking := rng.IntN(2) == 0
	var seen []inventory.Order
	for i := range 60 {
		o := inventory.Order{ID: fmt.Sprintf("%s-%d", name, i), SKU: skus[rng.IntN(len(skus))],
			Quantity: 1 + rng.Int64N(3)}
		action := rng.IntN(8) // 0, 1: redeliver an order seen before; 2: release one
		if len(seen) > 0 && action <= 2 {
			o = seen[rng.IntN(len(seen))]
		}
		seen = append(seen, o)
		var token int64
		if locking {
			locks[o.SKU].Lock()
			token = store.issue(o.SKU)
			rec.Acquired(o.SKU, o.ID, token, rec.now(), rec.now())
		}
		if action == 2 {
			doRelease(rec, store, o.ID, o.SKU, token)
		} else {
			_, _ = doReserve(rec, store, o, token)
		}
		if locking {
			rec.Released(o.SKU, o.ID, token, rec.now())
			locks[o.SKU].Unlock()
		}
	}
}

func TestOversellIsNotLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second inventory.Outcome
		want   porcupine.CheckResult
	}{
		{"the second of two concurrent reserves of the last unit is rejected", rejected(1, 0), porcupine.Ok},
		{"both concurrent reserves of the last unit succeed", reserved(1, 0), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			w1, w2 := s.recorder("w1"), s.recorder("w2")
			c1 := w1.Invoke(Reserve, "SKU-1", "o-1", 1, 0)
			c2 := w2.Invoke(Reserve, "SKU-1", "o-2", 1, 0)
			c1.Return(reserved(1, 0))
			c2.Return(tc.second)
			r := s.check(map[string]int64{"SKU-1": 1})
			got := skuResult(t, r, "SKU-1")
			if got.Result != tc.want || r.OK() != (tc.want == porcupine.Ok) {
				t.Fatalf("want %s, got\n%s", tc.want, r)
			}
			if tc.want == porcupine.Illegal && !strings.Contains(got.Stuck, `"o-`) {
				t.Fatalf("the report should name the operation that could not be placed:\n%s", r)
			}
		})
	}
}

func TestAnOrderIsDecidedOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		redelivery inventory.Outcome
		want       porcupine.CheckResult
	}{
		{"a redelivery gets the first decision back", replay(reserved(2, 3)), porcupine.Ok},
		{"a redelivery decrements the stock a second time", reserved(2, 1), porcupine.Illegal},
		{"a redelivery is decided afresh with the first decision's numbers", reserved(2, 3), porcupine.Illegal},
		{"a redelivery replays another decision than the first", replay(reserved(2, 1)), porcupine.Illegal},
		{"a redelivery is decided afresh as rejected", rejected(2, 3), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			w1, w2 := s.recorder("w1"), s.recorder("w2")
			w1.Invoke(Reserve, "SKU-1", "o-1", 2, 0).Return(reserved(2, 3))
			w2.Invoke(Reserve, "SKU-1", "o-1", 2, 0).Return(tc.redelivery)
			if got := skuResult(t, s.check(map[string]int64{"SKU-1": 5}), "SKU-1"); got.Result != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got.Result)
			}
		})
	}
}

func TestReleaseGivesBackOnce(t *testing.T) {
	released := outcome(order.StatusReleased, "", 2, 5, false)
	for _, tc := range []struct {
		name   string
		second inventory.Outcome
		want   porcupine.CheckResult
	}{
		{"a second release is a replay", replay(released), porcupine.Ok},
		{"a second release gives the stock back again", outcome(order.StatusReleased, "", 2, 7, false), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			w1 := s.recorder("w1")
			w1.Invoke(Reserve, "SKU-1", "o-1", 2, 0).Return(reserved(2, 3))
			w1.Invoke(Release, "SKU-1", "o-1", 0, 0).Return(released)
			w1.Invoke(Release, "SKU-1", "o-1", 0, 0).Return(tc.second)
			w1.Invoke(Release, "SKU-1", "o-9", 0, 0).Fail(fmt.Errorf("wrapped: %w", inventory.ErrNotReserved))
			if got := skuResult(t, s.check(map[string]int64{"SKU-1": 5}), "SKU-1"); got.Result != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got.Result)
			}
		})
	}
}

func TestAnUnknownSKUIsRejected(t *testing.T) {
	unknownSKU := outcome(order.StatusRejected, order.ReasonUnknownSKU, 1, 0, false)
	for _, tc := range []struct {
		name string
		out  inventory.Outcome
		want porcupine.CheckResult
	}{
		{"rejected as unknown", unknownSKU, porcupine.Ok},
		{"reserved", reserved(1, 0), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			s.recorder("w1").Invoke(Reserve, "SKU-9", "o-1", 1, 0).Return(tc.out)
			if got := skuResult(t, s.check(map[string]int64{"SKU-1": 5}), "SKU-9"); got.Result != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got.Result)
			}
		})
	}
}

// An operation whose outcome is unknown may have taken effect or not: both histories must pass, and it
// must not excuse a history that neither explains.
func TestUnknownOutcomesMayOrMayNotHaveTakenEffect(t *testing.T) {
	ends := map[string]func(*Call){
		"the worker was killed": func(*Call) {},
		"the call timed out":    func(c *Call) { c.Fail(fmt.Errorf("reserve: %w", context.DeadlineExceeded)) },
	}
	for end, finish := range ends {
		for _, tc := range []struct {
			name  string
			later func(w2 *Recorder)
			want  porcupine.CheckResult
		}{
			{"it did not take effect", func(w2 *Recorder) {
				w2.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Return(reserved(1, 0))
			}, porcupine.Ok},
			{"it took effect", func(w2 *Recorder) {
				w2.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Return(rejected(1, 0))
				w2.Invoke(Reserve, "SKU-1", "o-1", 1, 0).Return(replay(reserved(1, 0)))
			}, porcupine.Ok},
			{"neither explains the history", func(w2 *Recorder) {
				w2.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Return(reserved(1, 0))
				w2.Invoke(Reserve, "SKU-1", "o-1", 1, 0).Return(replay(reserved(1, 0)))
			}, porcupine.Illegal},
		} {
			t.Run(end+"/"+tc.name, func(t *testing.T) {
				s := newScript(t)
				w1, w2 := s.recorder("w1"), s.recorder("w2")
				finish(w1.Invoke(Reserve, "SKU-1", "o-1", 1, 0))
				tc.later(w2)
				got := skuResult(t, s.check(map[string]int64{"SKU-1": 1}), "SKU-1")
				if got.Result != tc.want || got.Unknown != 1 {
					t.Fatalf("want %s with 1 unknown outcome, got %s with %d", tc.want, got.Result, got.Unknown)
				}
			})
		}
	}
}

// Retries of one order that all timed out stand for one attempt: only the first to take effect could
// change anything. When a later attempt decided the order afresh, none of them took effect.
func TestRepeatedUnknownAttemptsCountOnce(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		final                  inventory.Outcome
		want                   porcupine.CheckResult
		checked, unknown, moot int
	}{
		{"one of the attempts reserved", replay(reserved(1, 0)), porcupine.Ok, 2, 1, 29},
		{"one of them reserved, but with the stock wrong", replay(reserved(1, 1)), porcupine.Illegal, 2, 1, 29},
		{"none did", reserved(1, 0), porcupine.Ok, 1, 0, 30},
		{"none did, and the final answer is wrong", rejected(1, 0), porcupine.Illegal, 1, 0, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			w1 := s.recorder("w1")
			for range 30 {
				w1.Invoke(Reserve, "SKU-1", "o-1", 1, 0).Fail(context.DeadlineExceeded)
			}
			w1.Invoke(Reserve, "SKU-1", "o-1", 1, 0).Return(tc.final)
			got := skuResult(t, s.check(map[string]int64{"SKU-1": 1}), "SKU-1")
			if got.Result != tc.want || got.Checked != tc.checked || got.Unknown != tc.unknown || got.Moot != tc.moot {
				t.Fatalf("want %s, %d checked (%d unknown), %d moot; got %+v", tc.want, tc.checked, tc.unknown,
					tc.moot, got)
			}
		})
	}
}

func TestRefusedOperationsHadNoEffect(t *testing.T) {
	s := newScript(t)
	w1 := s.recorder("w1")
	stale := &inventory.StaleFenceError{Op: "reserve", SKU: "SKU-1", Token: 1, Stored: 2}
	w1.Invoke(Reserve, "SKU-1", "o-1", 1, 1).Fail(stale)
	w1.Invoke(Reserve, "SKU-1", "o-2", 1, 2).Return(reserved(1, 0))
	got := skuResult(t, s.check(map[string]int64{"SKU-1": 1}), "SKU-1")
	if got.Result != porcupine.Ok || got.Refused != 1 || got.Checked != 1 {
		t.Fatalf("want Ok with the stale write left out, got %+v", got)
	}
}
