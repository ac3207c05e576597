package stockctl_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/internal/hot"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/lockmw"
)

type hotJSON struct {
	SinceMS int64     `json:"since_ms"`
	Total   int       `json:"skus_total"`
	SKUs    []hot.SKU `json:"skus"`
}

// stockctl hot shows what the workers published, merged: most total wait first, at most --limit, with the
// worst wait's trace (a Jaeger link with --jaeger-url); nothing published is said, not an error.
func TestHotShowsTheSKUsThatWaitedLongest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var empty hotJSON
	wantCode(t, e.runJSON(&empty, "hot"), stockctl.ExitOK)
	wantContains(t, "hot with nothing published", e.run("hot").stdout, "no lock waits recorded in the last 1m0s")

	ctx, now := context.Background(), time.Now()
	sampled := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	t0 := time.Unix(0, 0)
	for i, waits := range []map[string]time.Duration{{"SKU-0": 2 * time.Second, "SKU-1": 30 * time.Millisecond}, {"SKU-0": 500 * time.Millisecond, "SKU-2": 400 * time.Microsecond}} {
		r := hot.NewRecorder(e.rdb, slog.New(slog.NewTextHandler(io.Discard, nil))) // a worker each
		for sku, d := range waits {
			r.RecordWait(sampled, lockmw.Wait{Keys: []string{sku}, From: t0, Until: t0.Add(d)})
		}
		if err := r.Publish(ctx, now.Add(-time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	var got hotJSON
	wantCode(t, e.runJSON(&got, "hot", "--limit", "2"), stockctl.ExitOK)
	id := trace.TraceID{1}.String()
	if got.Total != 3 || len(got.SKUs) != 2 || got.SinceMS != 60000 ||
		got.SKUs[0] != (hot.SKU{SKU: "SKU-0", Orders: 2, TotalWaitMS: 2500, WorstWaitMS: 2000, WorstTraceID: id, LastTraceID: id}) ||
		got.SKUs[1].SKU != "SKU-1" {
		t.Fatalf("hot --limit 2: %+v, want SKU-0 (2 orders, 2500 ms, worst 2000 ms, trace %s) then SKU-1, of 3", got, id)
	}
	r := e.run("hot", "--jaeger-url", "http://jaeger:16686/")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "hot", r.stdout, "3 of 3 SKUs", "SKU-0  2       2.5s        2s          1.3s", "http://jaeger:16686/trace/"+id,
		"SKU-2  1       400µs")
	wantContains(t, "hot -o wide", e.run("hot", "-o", "wide").stdout, "LAST TRACE")
	wantCode(t, e.run("hot", "--since", "11m"), stockctl.ExitUsage)
}

// --sort-by orders ranks a SKU of many orders that hardly waited (batched, its lock elided) first; worst by
// the worst wait; anything else is refused.
func TestHotSortsByOrdersOrWorstWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := hot.NewRecorder(e.rdb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t0 := time.Unix(0, 0)
	record := func(sku string, orders int, wait time.Duration) {
		for range orders {
			r.RecordWait(context.Background(), lockmw.Wait{Keys: []string{sku}, From: t0, Until: t0.Add(wait)})
		}
	}
	record("SKU-busy", 50, 100*time.Microsecond) // 5 ms in all
	record("SKU-slow", 2, 40*time.Millisecond)   // 80 ms in all, worst 40 ms
	record("SKU-spike", 1, 60*time.Millisecond)  // 60 ms in all, worst 60 ms
	if err := r.Publish(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sortBy string
		want   []string
	}{{"wait", []string{"SKU-slow", "SKU-spike", "SKU-busy"}}, {"orders", []string{"SKU-busy", "SKU-slow", "SKU-spike"}},
		{"worst", []string{"SKU-spike", "SKU-slow", "SKU-busy"}}} {
		var got hotJSON
		wantCode(t, e.runJSON(&got, "hot", "--sort-by", c.sortBy), stockctl.ExitOK)
		var names []string
		for _, s := range got.SKUs {
			names = append(names, s.SKU)
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("hot --sort-by %s: %v, want %v", c.sortBy, names, c.want)
		}
	}
	wantContains(t, "hot --sort-by orders", e.run("hot", "--sort-by", "orders").stdout, "most orders first")
	bad := e.run("hot", "--sort-by", "cpu")
	wantCode(t, bad, stockctl.ExitUsage)
	wantContains(t, "hot --sort-by cpu", bad.stderr, "--sort-by", "want wait, orders, worst")
}
