package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/hot"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// With the demo's mix (6,000 orders over 20 SKUs, half of them on SKU-0, baskets of 1-3 lines, 200 in
// stock each) decided by the demo's three workers at the default concurrency, which export their traces to
// a real Jaeger, stockctl hot lists the SKUs by total lock wait, most first, SKU-0 among them with every
// order of it the workers decided, its total and worst wait, and the worst wait's trace, which Jaeger
// returns with the order's "lock wait" span on SKU-0. (SKU-0 need not be first: with the lock elided and its
// orders batched, every SKU's waits here are microseconds, and one basket's wait on another SKU can outweigh
// them all.)
func TestHotListsTheHotSKUWithATraceJaegerHas(t *testing.T) {
	j := startJaeger(t)
	s := redistest.Start(t)
	for _, name := range []string{"w0", "w1", "w2"} {
		startWorker(t, s, name, append(j.exportEnv(workerService), "WORKER_CONCURRENCY="+strconv.Itoa(worker.DefaultConcurrency))...)
	}
	sum := produceEnv(t, append([]string{"REDIS_URL=" + s.URL()}, j.exportEnv(producerService)...),
		"--orders", "6000", "--skus", "20", "--distribution", "hot", "--lines", "1-3", "--seed-stock", "200")
	assertConsistent(t, sum)
	decided := 0
	for _, n := range sum.SKUs["SKU-0"].DecidedBy {
		decided += n
	}

	var got struct {
		SKUs []hot.SKU `json:"skus"`
	}
	// A worker publishes what it noted once a second (15 s: a loaded machine delays the workers' last
	// publish and stockctl's runs).
	var top hot.SKU // SKU-0's line
	defer func() {
		if t.Failed() {
			t.Logf("stockctl hot's SKU-0 at the end: %+v; the producer counted %d decided events of SKU-0", top, decided)
		}
	}()
	waitFor(t, 15*time.Second, "stockctl hot counts every decided event of SKU-0", func() bool {
		code, stdout, stderr := runStockctl(t, s.URL(), "hot", "--since", "5m", "-o", "json")
		if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != 0 {
			t.Fatalf("stockctl hot: exit %d, %v\n%s%s", code, err, stdout, stderr)
		}
		for _, sku := range got.SKUs {
			if sku.SKU == "SKU-0" {
				top = sku
			}
		}
		return top.Orders >= int64(decided)
	})
	t.Logf("stockctl hot: %+v; the producer counted %d events of SKU-0, %.0f ms of lock wait", got.SKUs[:min(3, len(got.SKUs))],
		decided, sum.SKUs["SKU-0"].LockWaitMs)
	if top.Orders != int64(decided) || top.WorstWaitMS <= 0 || top.TotalWaitMS < top.WorstWaitMS || top.WorstTraceID == "" {
		t.Fatalf("SKU-0 is %+v; want its %d decided events, a total and worst wait, a trace", top, decided)
	}
	if !slices.IsSortedFunc(got.SKUs, func(a, b hot.SKU) int { return cmp.Compare(b.TotalWaitMS, a.TotalWaitMS) }) {
		t.Fatalf("stockctl hot's SKUs are not by total wait, most first: %+v", got.SKUs)
	}

	// The trace is the order's, whole: Jaeger has it, with its lock wait span on SKU-0.
	var found jaegerTrace
	waitFor(t, 30*time.Second, "Jaeger returns the worst wait's trace", func() bool {
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := j.get(ctx, "/api/traces/"+top.WorstTraceID, nil, &body); err != nil || len(body.Data) == 0 {
			return false
		}
		found = body.Data[0]
		return true
	})
	for _, span := range found.Spans {
		if key, _ := tagValue(span.Tags, attrLockKey); span.OperationName == lockWaitSpan && strings.Contains(key, "SKU-0") {
			return
		}
	}
	t.Fatalf("trace %s has no %q span on SKU-0: %+v", top.WorstTraceID, lockWaitSpan, found.Spans)
}
