package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
)

func TestEventsAreOneJSONLineEach(t *testing.T) {
	s := newScript(t)
	rec := s.recorder("w1")
	invoked := s.clock.now()
	rec.Acquired("SKU-1", "owner-1", 3, invoked, s.clock.now())
	rec.Invoke(Reserve, "SKU-1", "o-1", 2, 3).Return(reserved(2, 0))
	rec.Invoke(Reserve, "SKU-1", "o-2", 1, 3).Fail(errors.New("i/o timeout"))
	rec.Released("SKU-1", "owner-1", 3, s.clock.now())

	data, err := os.ReadFile(s.paths[0])
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"event", "worker", "time", "invoked", "key", "owner", "token"},
		{"event", "worker", "time", "op", "kind", "sku", "order", "quantity", "token"},
		{"event", "worker", "time", "op", "status", "reason", "quantity", "available_after", "replayed"},
		{"event", "worker", "time", "op", "kind", "sku", "order", "quantity", "token"},
		{"event", "worker", "time", "op", "failure", "error"},
		{"event", "worker", "time", "key", "owner", "token"},
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d lines, got %d:\n%s", len(want), len(lines), data)
	}
	for i, line := range lines {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, slices.Sorted(slices.Values(want[i]))) {
			t.Errorf("line %d has fields %v, want %v", i+1, got, want[i])
		}
	}
	if !strings.Contains(lines[4], `"failure":"unknown"`) || !strings.Contains(lines[2], `"available_after":0`) {
		t.Errorf("unexpected content:\n%s", data)
	}
}

func TestLoadPairsEventsAcrossFiles(t *testing.T) {
	s := newScript(t)
	a, b := s.recorder("A"), s.recorder("B")
	token := s.acquire(a, newFakeStore(nil, true), "SKU-1")
	ca := a.Invoke(Reserve, "SKU-1", "o-1", 2, token)
	b.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Fail(&inventory.StaleFenceError{Op: "reserve", SKU: "SKU-1"})
	ca.Return(reserved(2, 3))
	s.release(a, "SKU-1", token)
	a.Invoke(Release, "SKU-1", "o-1", 0, 0) // killed before the return

	h, err := Load(s.paths[1], s.paths[0]) // in any order
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 3 || len(h.Holds) != 1 {
		t.Fatalf("want 3 operations and 1 hold, got %+v", h)
	}
	first, refused, killed := h.Ops[0], h.Ops[1], h.Ops[2]
	if first.Worker != "A" || first.Token != 1 || first.Result != (Result{Status: order.StatusReserved, Quantity: 2, AvailableAfter: 3}) ||
		!first.Returned.After(refused.Returned) || first.Source != s.paths[0]+":2" {
		t.Errorf("first op: %+v", first)
	}
	if refused.Failure != Refused || !strings.Contains(refused.Error, "stale fencing token") {
		t.Errorf("refused op: %+v", refused)
	}
	if killed.Failure != Unknown || !killed.Returned.IsZero() || killed.Kind != Release {
		t.Errorf("killed op: %+v", killed)
	}
	if hold := h.Holds[0]; hold.Token != 1 || hold.Worker != "A" || !hold.Released.After(hold.Acquired) ||
		!hold.Acquired.After(hold.Invoked) {
		t.Errorf("hold: %+v", hold)
	}
}

// A worker killed while writing leaves an incomplete last line: the operation it ended counts as
// unknown, and the check considers both outcomes.
func TestATruncatedLastLineIsAnUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name  string
		later inventory.Outcome
		want  porcupine.CheckResult
	}{
		{"it took effect", rejected(1, 0), porcupine.Ok},
		{"it did not", reserved(1, 0), porcupine.Ok},
		{"neither", reserved(1, 1), porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			w1, w2 := s.recorder("w1"), s.recorder("w2")
			w1.Invoke(Reserve, "SKU-1", "o-1", 1, 0).Return(reserved(1, 0))
			truncateLastLine(t, s.paths[0])
			w2.Invoke(Reserve, "SKU-1", "o-2", 1, 0).Return(tc.later)

			h, err := Load(s.paths...)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{s.paths[0] + ":2"}; !slices.Equal(h.Truncated, want) || h.Ops[0].Failure != Unknown {
				t.Fatalf("want %v truncated and o-1 unknown, got %v and %+v", want, h.Truncated, h.Ops[0])
			}
			r := Check(h, map[string]int64{"SKU-1": 1}, 0)
			if got := skuResult(t, r, "SKU-1"); got.Result != tc.want {
				t.Fatalf("want %s, got\n%s", tc.want, r)
			}
			if !strings.Contains(r.String(), s.paths[0]+":2") {
				t.Errorf("the report should name the truncated line:\n%s", r)
			}
		})
	}
}

// truncateLastLine cuts the last line of path in the middle, as a kill -9 mid-write could.
func truncateLastLine(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.LastIndexByte(data[:len(data)-1], '\n') + 1
	if err := os.Truncate(path, int64(start+(len(data)-start)/2)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsGarbageWithFileAndLine(t *testing.T) {
	const (
		invoke  = `{"event":"invoke","worker":"w1","time":"2025-01-02T10:00:00Z","op":"x-1","kind":"reserve","sku":"S","order":"o-1","quantity":1,"token":0}`
		ret     = `{"event":"return","worker":"w1","time":"2025-01-02T10:00:01Z","op":"x-1","status":"reserved","reason":"","quantity":1,"available_after":0,"replayed":false}`
		acquire = `{"event":"acquired","worker":"w1","time":"2025-01-02T10:00:01Z","invoked":"2025-01-02T10:00:00Z","key":"S","owner":"o","token":1}`
	)
	for _, tc := range []struct {
		name, content, want string
	}{
		{"garbage in the middle", invoke + "\n{not json\n" + ret + "\n", ":2: not a history event"},
		{"a complete garbage last line", invoke + "\n" + ret + "\ngarbage\n", ":3: not a history event"},
		{"an unknown field", strings.Replace(invoke, `"token"`, `"tokens"`, 1) + "\n", `:1: not a history event: json: unknown field "tokens"`},
		{"two objects on a line", invoke + invoke + "\n", ":1: not a history event: data after the object"},
		{"an empty line", invoke + "\n\n" + ret + "\n", ":2: not a history event"},
		{"an unknown event", `{"event":"commit","worker":"w1","time":"2025-01-02T10:00:00Z"}` + "\n", `:1: commit event: unknown event "commit"`},
		{"no worker", strings.Replace(invoke, `"worker":"w1"`, `"worker":""`, 1) + "\n", `:1: invoke event: "worker" and "time" are required`},
		{"an unknown kind", strings.Replace(invoke, `"reserve"`, `"restock"`, 1) + "\n", `:1: invoke event: kind "restock"`},
		{"an unknown failure", invoke + "\n" + `{"event":"fail","worker":"w1","time":"2025-01-02T10:00:01Z","op":"x-1","failure":"maybe","error":"e"}` + "\n", `:2: fail event: failure "maybe"`},
		{"a return of an op never invoked", ret + "\n", `:1: return of op "x-1", which was never invoked`},
		{"a second return", invoke + "\n" + ret + "\n" + ret + "\n", `:3: second return of op "x-1"`},
		{"an op invoked twice", invoke + "\n" + invoke + "\n", `:2: op "x-1" was already invoked at `},
		{"a return before its invocation", strings.Replace(invoke, "10:00:00Z", "10:00:02Z", 1) + "\n" + ret + "\n", ":2: op \"x-1\" ends at"},
		{"a release of a lock never acquired", strings.Replace(acquire, `"acquired"`, `"released"`, 1) + "\n", ":1: release of S by o with token 1 matches no open acquisition"},
		{"an acquisition without a token", strings.Replace(acquire, `"token":1`, `"token":0`, 1) + "\n", ":1: acquired event: token 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), path+tc.want) {
				t.Fatalf("want an error containing %q, got %v", path+tc.want, err)
			}
		})
	}
}

func TestLoadReportsAMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("want ErrNotExist, got %v", err)
	}
}

func TestANilRecorderRecordsNothing(t *testing.T) {
	var rec *Recorder
	rec.Acquired("SKU-1", "o", 1, time.Now(), time.Now())
	rec.Released("SKU-1", "o", 1, time.Now())
	call := rec.Invoke(Reserve, "SKU-1", "o-1", 1, 0)
	if call != nil {
		t.Fatalf("want a nil call, got %+v", call)
	}
	call.Return(reserved(1, 0))
	call.Fail(io.EOF)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// Processes append to one file at once: every line must come out whole.
func TestConcurrentRecordersShareAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.jsonl")
	var wg sync.WaitGroup
	var recs []*Recorder
	for p := range 2 {
		rec, err := Open(path, fmt.Sprintf("p%d", p))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		for g := range 8 {
			wg.Go(func() {
				for i := range 200 {
					rec.Invoke(Reserve, "SKU-1", fmt.Sprintf("o-%d-%d-%d", p, g, i), 1, 0).Return(rejected(1, 0))
				}
			})
		}
	}
	wg.Wait()
	for _, rec := range recs {
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	h, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 2*8*200 {
		t.Fatalf("want %d operations, got %d", 2*8*200, len(h.Ops))
	}
	for _, op := range h.Ops {
		if op.Failure != "" {
			t.Fatalf("every operation returned, but %+v", op)
		}
	}
}

func TestOpenAndCloseReportErrors(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir"), "w1"); err == nil {
		t.Fatal("want an error for a missing directory")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "h.jsonl"), ""); err == nil {
		t.Fatal("want an error for an empty worker name")
	}
	rec, err := Open(filepath.Join(t.TempDir(), "h.jsonl"), "w1")
	if err != nil {
		t.Fatal(err)
	}
	_ = rec.f.Close() // the next write fails
	rec.Invoke(Reserve, "SKU-1", "o-1", 1, 0)
	if err := rec.Close(); err == nil || !strings.Contains(err.Error(), "history: recording") {
		t.Fatalf("want the write error from Close, got %v", err)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Failure
	}{
		{&inventory.StaleFenceError{Op: "reserve", SKU: "S", Token: 1, Stored: 2}, Refused},
		{fmt.Errorf("%w: quantity 0", order.ErrInvalid), Refused},
		{fmt.Errorf("release: %w", inventory.ErrNotReserved), Refused},
		{stock.ErrUnknownSKU, Refused},
		{inventory.ErrCorrupt, Refused},
		{context.DeadlineExceeded, Unknown},
		{context.Canceled, Unknown},
		{io.EOF, Unknown},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, Unknown},
		{errors.New("LOADING Redis is loading the dataset in memory"), Unknown},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
