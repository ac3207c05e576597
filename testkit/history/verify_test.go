package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// recordingTB captures what Verify reports instead of failing the test.
type recordingTB struct {
	testing.TB
	errors, fatals []string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Logf(string, ...any)       {}
func (r *recordingTB) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.fatals = append(r.fatals, fmt.Sprintf(f, a...)) }

func TestVerifyFailsWithAReportAndAVisualization(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(VisualizationDirEnv, dir)
	s := newScript(t)
	store := newFakeStore(map[string]int64{"SKU-1": 1}, false)
	a, b := s.recorder("A"), s.recorder("B")
	tokenA, tokenB := s.acquire(a, store, "SKU-1"), s.acquire(b, store, "SKU-1")
	a.Invoke(Reserve, "SKU-1", "o-1", 1, tokenA).Return(reserved(1, 0)) // stale, and
	b.Invoke(Reserve, "SKU-1", "o-2", 1, tokenB).Return(reserved(1, 0)) // oversold
	b.Invoke(Reserve, "SKU-2", "o-3", 1, 0).Return(reserved(1, 0))      // fine

	tb := &recordingTB{TB: t}
	r := Verify(tb, s.paths, map[string]int64{"SKU-1": 1, "SKU-2": 1})
	if r.OK() || len(tb.errors) != 1 || len(tb.fatals) != 0 {
		t.Fatalf("want one error, got errors %q, fatals %q", tb.errors, tb.fatals)
	}
	msg := tb.errors[0]
	file := filepath.Join(dir, "history-SKU-1.html")
	for _, want := range []string{"SKU-1: Illegal", "SKU-2: Ok", "SKU-1: stale token", "could not be placed", file} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure should say %q:\n%s", want, msg)
		}
	}
	html, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(html), "<html") || !strings.Contains(string(html), "stale token") {
		t.Fatalf("want an HTML visualization with the violation at %s: %v", file, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "history-SKU-2.html")); !os.IsNotExist(err) {
		t.Errorf("a SKU that passed needs no visualization: %v", err)
	}
}

func TestVerifyFailsOnAnEmptyHistory(t *testing.T) {
	s := newScript(t)
	s.recorder("w1").Acquired("SKU-1", "o", 1, s.clock.now(), s.clock.now())
	tb := &recordingTB{TB: t}
	Verify(tb, s.paths, nil)
	if len(tb.fatals) == 0 || !strings.Contains(tb.fatals[0], "no stock operations recorded") {
		t.Fatalf("want a failure for a history without operations, got %q", tb.fatals)
	}
}

func TestVerifyPassesACorrectHistory(t *testing.T) {
	s := newScript(t)
	s.recorder("w1").Invoke(Reserve, "SKU-1", "o-1", 1, 0).Return(reserved(1, 0))
	tb := &recordingTB{TB: t}
	if r := Verify(tb, s.paths, map[string]int64{"SKU-1": 1}); !r.OK() || len(tb.errors)+len(tb.fatals) > 0 {
		t.Fatalf("want a pass, got %q %q", tb.errors, tb.fatals)
	}
}

// simulate builds a linearizable history of n operations on each SKU (a fifth of the stock each):
// one operation takes effect every 10 µs, each invoked up to 40 µs before and returning up to 40 µs
// after that point, so about eight are in flight at once. A tenth are redeliveries, a twentieth
// releases, a hundredth have an unknown outcome (applied or not at random); tokens grow with time.
func simulate(skus []string, n int, seed uint64) (History, map[string]int64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	initial := make(map[string]int64)
	for _, sku := range skus {
		initial[sku] = int64(n) / 5
	}
	store := newFakeStore(initial, true)
	base := time.Date(2025, 1, 2, 10, 0, 0, 0, time.UTC)
	var h History
	for _, sku := range skus {
		for k := range n {
			at := base.Add(time.Duration(k) * 10 * time.Microsecond)
			op := simulatedOp(rng, store, sku, k)
			op.Invoked = at.Add(-time.Duration(rng.IntN(40_000)))
			if op.Failure != Unknown {
				op.Returned = at.Add(time.Duration(rng.IntN(40_000)))
			}
			h.Ops = append(h.Ops, op)
		}
	}
	return h, initial
}

// simulatedOp runs the k-th operation of sku on store.
func simulatedOp(rng *rand.Rand, store *fakeStore, sku string, k int) Op {
	op := Op{ID: fmt.Sprintf("%s-%d", sku, k), Worker: fmt.Sprintf("w%d", k%4), Kind: Reserve, SKU: sku,
		OrderID: fmt.Sprintf("%s-o-%d", sku, k), Quantity: 1 + rng.Int64N(3), Token: int64(k/5 + 1)}
	if k > 0 && rng.IntN(10) == 0 {
		op.OrderID = fmt.Sprintf("%s-o-%d", sku, rng.IntN(k))
	}
	var out inventory.Outcome
	var err error
	switch unknown := rng.IntN(100) == 0; {
	case unknown && rng.IntN(2) == 0:
		op.Failure = Unknown
		return op
	case rng.IntN(20) == 0:
		op.Kind, op.Quantity = Release, 0
		out, err = store.release(op.OrderID, sku, op.Token)
	default:
		out, err = store.reserve(inventory.Order{ID: op.OrderID, SKU: sku, Quantity: op.Quantity}, op.Token)
		if unknown {
			op.Failure = Unknown
			return op
		}
	}
	if err != nil {
		op.Failure, op.Error = Classify(err), err.Error()
	}
	op.Result = Result{Status: out.Status, Reason: out.Reason, Quantity: out.Quantity,
		AvailableAfter: out.AvailableAfter, Replayed: out.Replayed}
	return op
}

func TestALargeSimulatedHistory(t *testing.T) {
	h, initial := simulate([]string{"SKU-0", "SKU-1"}, 2000, 1)
	if r := Check(h, initial, 0); !r.OK() {
		t.Fatalf("want the simulated history to pass:\n%s", r)
	}
	// One reserve in the middle reports one unit more than there was.
	for i := len(h.Ops) / 4; ; i++ {
		if op := &h.Ops[i]; op.Failure == "" && op.Result.Status == order.StatusReserved && !op.Result.Replayed {
			op.Result.AvailableAfter++
			break
		}
	}
	r := Check(h, initial, 0)
	if skuResult(t, r, "SKU-0").Result != porcupine.Illegal || skuResult(t, r, "SKU-1").Result != porcupine.Ok {
		t.Fatalf("want SKU-0 Illegal and SKU-1 Ok:\n%s", r)
	}
}

// BenchmarkCheck5000 checks 5,000 operations on each of 3 SKUs, about eight in flight at once.
func BenchmarkCheck5000(b *testing.B) {
	h, initial := simulate([]string{"SKU-0", "SKU-1", "SKU-2"}, 5000, 1)
	for b.Loop() {
		if r := Check(h, initial, 0); !r.OK() {
			b.Fatalf("%s", r)
		}
	}
}

// BenchmarkCheck5000Illegal finds the one wrong answer (a rejection that reports a unit more than there
// was) in 5,000 operations on one SKU: proving that no linearization exists searches much more.
func BenchmarkCheck5000Illegal(b *testing.B) {
	h, initial := simulate([]string{"SKU-0"}, 5000, 1)
	for i := 1500; ; i++ {
		if op := &h.Ops[i]; op.Failure == "" && op.Result.Status == order.StatusRejected && !op.Result.Replayed {
			op.Result.AvailableAfter++
			break
		}
	}
	for b.Loop() {
		if r := Check(h, initial, 0); r.SKUs[0].Result != porcupine.Illegal {
			b.Fatalf("%s", r)
		}
	}
}

func TestOrdersAreImmutableAndCompareByContent(t *testing.T) {
	var a, b orders
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("o-%d", i)
		a = a.put(ids[i], decision{status: order.StatusReserved, quantity: int64(i)})
	}
	before := a
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(len(ids)) {
		b = b.put(ids[i], decision{status: order.StatusReserved, quantity: int64(i)})
	}
	if !a.equal(b) || a.root == b.root {
		t.Fatal("the same entries inserted in another order must be equal")
	}
	changed := a.put("o-7", decision{status: order.StatusReleased, quantity: 7})
	if d, _ := before.get("o-7"); d.status != order.StatusReserved || a.equal(changed) || changed.n != a.n {
		t.Fatalf("put changed the original or the change was not seen: %+v", d)
	}
	if d, ok := changed.get("o-7"); !ok || d.status != order.StatusReleased {
		t.Fatalf("want the change in the new map, got %+v %v", d, ok)
	}
	forged := changed
	forged.sum = a.sum // as if the hashes collided: the entries must still decide
	if a.equal(forged) {
		t.Fatal("maps with different entries compared equal")
	}
	if _, ok := a.get("o-500"); ok {
		t.Fatal("found an id never put")
	}
}
