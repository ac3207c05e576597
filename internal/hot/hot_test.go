package hot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/testkit/redistest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// traced is a context of a trace whose id ends in n, sampled or not.
func traced(n byte, sampled bool) context.Context {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{15: n}, SpanID: trace.SpanID{7: 1}, TraceFlags: flags})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func wait(d time.Duration, keys ...string) lockmw.Wait {
	t0 := time.Unix(1000, 0)
	return lockmw.Wait{Keys: keys, From: t0, Until: t0.Add(d), Path: lockmw.PathAcquired}
}

func traceID(n byte) string { return trace.TraceID{15: n}.String() }

// Two workers' waits of one window add up: orders and total wait summed, the worst wait the greater with
// its trace, the last sampled trace kept; a basket's wait counts for each of its SKUs; Read sorts by total
// wait and writes nothing a worker did not see.
func TestWorkersWaitsAddUpInAWindow(t *testing.T) {
	s := redistest.Start(t)
	rdb, ctx := s.Client(), context.Background()
	now := time.Now()
	a, b := NewRecorder(rdb, quiet), NewRecorder(rdb, quiet)
	a.RecordWait(traced(1, true), wait(300*time.Millisecond, "HOT"))
	a.RecordWait(traced(2, false), wait(100*time.Millisecond, "HOT")) // not sampled: not the last trace
	a.RecordWait(traced(3, true), wait(1500*time.Microsecond, "COLD", "HOT"))
	b.RecordWait(traced(4, true), wait(700*time.Millisecond, "HOT"))
	b.RecordWait(traced(5, false), wait(2*time.Millisecond, "COLD")) // the worst of COLD, unsampled
	for _, r := range []*Recorder{a, b} {
		if err := r.Publish(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Publish(ctx, now); err != nil { // nothing new: nothing written
		t.Fatal(err)
	}
	got, err := Read(ctx, rdb, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []SKU{
		{SKU: "HOT", Orders: 4, TotalWaitMS: 1101.5, WorstWaitMS: 700, WorstTraceID: traceID(4), LastTraceID: traceID(4)},
		{SKU: "COLD", Orders: 2, TotalWaitMS: 3.5, WorstWaitMS: 2, WorstTraceID: "", LastTraceID: traceID(3)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Read:\n got %+v\nwant %+v", got, want)
	}
	if ttl := rdb.PTTL(ctx, Key(WindowOf(now))).Val(); ttl <= Retention || ttl > Retention+Window {
		t.Fatalf("the window's TTL is %v, want Retention+Window", ttl)
	}
}

// Read merges the windows that overlap the span asked for, and only those: a window older than the span
// does not count.
func TestReadMergesTheWindowsOfTheSpan(t *testing.T) {
	s := redistest.Start(t)
	rdb, ctx := s.Client(), context.Background()
	now := time.Now()
	r := NewRecorder(rdb, quiet)
	for i, at := range []time.Time{now.Add(-5 * time.Minute), now.Add(-30 * time.Second), now} {
		r.RecordWait(traced(byte(i+1), true), wait(time.Duration(i+1)*time.Millisecond, "SKU-0"))
		if err := r.Publish(ctx, at); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(ctx, rdb, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Orders != 2 || got[0].TotalWaitMS != 5 || got[0].WorstWaitMS != 3 || got[0].LastTraceID != traceID(3) {
		t.Fatalf("the last minute: %+v, want SKU-0's 2 orders of the last two windows (5 ms in all, worst 3 ms)", got)
	}
	if got, _ := Read(ctx, rdb, now, 6*time.Minute); len(got) != 1 || got[0].Orders != 3 {
		t.Fatalf("the last 6 minutes: %+v, want all 3 orders", got)
	}
}

// A worker publishes its MaxPublished SKUs of most wait per second, and a window keeps its MaxPerWindow
// SKUs of most total wait: the others go, with their fields.
func TestAWindowKeepsItsMostWaitedSKUs(t *testing.T) {
	s := redistest.Start(t)
	rdb, ctx := s.Client(), context.Background()
	now := time.Now()
	r := NewRecorder(rdb, quiet)
	const n = MaxPerWindow + MaxPublished // in publications of MaxPublished, least waited first
	for i := range n {
		r.RecordWait(context.Background(), wait(time.Duration(i+1)*time.Millisecond, fmt.Sprintf("S%d", i)))
		if (i+1)%MaxPublished == 0 {
			if err := r.Publish(ctx, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.RecordWait(context.Background(), wait(time.Hour, "X"))
	for i := range MaxPublished {
		r.RecordWait(context.Background(), wait(time.Microsecond, fmt.Sprintf("tiny%d", i)))
	}
	if err := r.Publish(ctx, now); err != nil { // X and MaxPublished-1 of the tiny ones
		t.Fatal(err)
	}
	got, err := Read(ctx, rdb, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxPerWindow || got[0].SKU != "X" || got[1].SKU != fmt.Sprintf("S%d", n-1) ||
		got[len(got)-1].SKU != fmt.Sprintf("S%d", n-MaxPerWindow+1) {
		t.Fatalf("%d SKUs kept, first %v, last %v; want %d: X, then S%d down to S%d", len(got), got[0], got[len(got)-1],
			MaxPerWindow, n-1, n-MaxPerWindow+1)
	}
	if fields := rdb.HLen(ctx, StatsKey(WindowOf(now))).Val(); fields != 3*MaxPerWindow { // orders, worst_ms, worst_trace
		t.Fatalf("the window's hash has %d fields, want %d: those of the SKUs dropped go too", fields, 3*MaxPerWindow)
	}
}

// The cost on the order's path: one wait told to the recorder (a mutex and a map update).
func BenchmarkRecordWait(b *testing.B) {
	r := NewRecorder(nil, quiet)
	ctx := traced(1, true)
	skus := make([]lockmw.Wait, 100)
	for i := range skus {
		skus[i] = wait(time.Millisecond, fmt.Sprintf("SKU-%d", i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.RecordWait(ctx, skus[i%len(skus)])
			i++
		}
	})
}
