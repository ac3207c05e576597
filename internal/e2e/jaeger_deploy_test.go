package e2e

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// What an operator finds in Jaeger about an order's wait for its SKU (DESIGN.md: "every order records its
// wait for its SKU in one histogram and on its trace, whatever the path").

const (
	workerService   = "stockflow-worker" // OTEL_SERVICE_NAME of the workers in compose.yaml
	producerService = "stockflow-producer"
	attrLockWait    = "stockflow.lock.wait.seconds"
	attrLockKey     = "stockflow.lock.key"
	lockWaitSpan    = "lock wait"
)

// traceShowsLockWait reports whether an order's spans (its consumer span and the spans under it) show how
// long it waited for its SKU and for which lock: a span named "lock wait", or a span or span event that
// carries stockflow.lock.wait.seconds and stockflow.lock.key (an event's key may be on its span).
func traceShowsLockWait(spans []jaegerSpan) bool {
	for _, s := range spans {
		if s.OperationName == lockWaitSpan || hasTag(s.Tags, attrLockWait) && hasTag(s.Tags, attrLockKey) {
			return true
		}
		for _, event := range s.Logs {
			if hasTag(event.Fields, attrLockWait) && (hasTag(event.Fields, attrLockKey) || hasTag(s.Tags, attrLockKey)) {
				return true
			}
		}
	}
	return false
}

// deploy/jaeger/config.yaml in the Jaeger release compose.yaml runs (scripts/ensure-jaeger.sh builds it):
// a worker with lock elision on (the default) exports its spans there over OTLP, and 100 orders go through,
// half of them on one SKU, so that some wait for their lock, some are decided in another order's batch and
// some take the lock free.
func TestJaegerWithTheDeployConfig(t *testing.T) {
	j := startJaeger(t)
	s := redistest.Start(t)
	startWorker(t, s, "w0", j.exportEnv(workerService)...)
	sum := produceEnv(t, append([]string{"REDIS_URL=" + s.URL()}, j.exportEnv(producerService)...),
		"--orders", "100", "--skus", "50", "--distribution", "hot", "--seed-stock", "1000")
	assertConsistent(t, sum)

	// At least 95 % of the orders show their lock wait under their consumer span ("process orders").
	t.Run("every order's trace shows its lock wait", func(t *testing.T) {
		orders := orderSpans(t, j, sum.Published)
		shown := 0
		for _, spans := range orders {
			if traceShowsLockWait(spans) {
				shown++
			}
		}
		fraction := float64(shown) / float64(len(orders))
		t.Logf("%d of %d orders (%.0f %%) show their lock wait in Jaeger", shown, len(orders), 100*fraction)
		if fraction < 0.95 {
			t.Errorf("%d of %d orders show their lock wait (a %q span, or %s with %s): want at least 95 %%",
				shown, len(orders), lockWaitSpan, attrLockWait, attrLockKey)
		}
	})
	// The dashboard's span metrics queries (dashboard_test.go, spanMetricsSource) expect these names and labels.
	t.Run("the span metrics carry the names and labels the dashboard reads", func(t *testing.T) {
		want := map[string]string{"service_name": workerService, "span_name": "process orders"}
		for _, name := range readJaegerConfig(t).spanMetrics(t).metricNames() {
			waitForSeries(t, "http://"+j.metrics+"/metrics", name, want)
		}
	})
}

// waitForSeries waits until the exposition at url has a series name with (at least) the labels want; the
// span metrics connector flushes every metrics_flush_interval (15 s).
func waitForSeries(t *testing.T, url, name string, want map[string]string) {
	t.Helper()
	var names []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		scraped, err := parseExposition(scrapeText(t, url))
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, s := range scraped {
			names = append(names, s.name)
			if s.name == name && hasLabels(s.labels, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no series %s with labels %v after 30 s; it has %v", url, name, want, slices.Compact(slices.Sorted(slices.Values(names))))
		}
	}
}

func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// scrapeText gets url's exposition in the Prometheus text format.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// orderSpans waits until Jaeger holds the consumer spans of want orders and returns, by order (the
// message id), the consumer span of each of its deliveries and the spans under them.
func orderSpans(t *testing.T, j *jaeger, want int) map[string][]jaegerSpan {
	t.Helper()
	consumer := "process orders"
	var orders map[string][]jaegerSpan
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		orders = map[string][]jaegerSpan{}
		for _, tr := range j.traces(t, workerService, consumer) {
			for _, s := range tr.Spans {
				id, ok := tagValue(s.Tags, "messaging.message.id")
				if s.OperationName == consumer && tr.Processes[s.ProcessID].ServiceName == workerService && ok {
					orders[id] = append(orders[id], subtree(tr.Spans, s)...)
				}
			}
		}
		if len(orders) >= want {
			return orders
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger shows %q spans of %d orders after 30 s, want %d", consumer, len(orders), want)
		}
	}
}

func TestTraceShowsLockWait(t *testing.T) {
	key := jaegerTag{Key: attrLockKey, Value: "SKU-0"}
	wait := jaegerTag{Key: attrLockWait, Value: 0.002}
	span := func(name string, tags ...jaegerTag) jaegerSpan { return jaegerSpan{OperationName: name, Tags: tags} }
	withEvent := func(s jaegerSpan, fields ...jaegerTag) jaegerSpan {
		s.Logs = append(s.Logs, jaegerLog{Fields: fields})
		return s
	}
	for _, c := range []struct {
		name  string
		spans []jaegerSpan
		want  bool
	}{
		{"a lock wait span shows it", []jaegerSpan{span("process orders"), span("lock wait")}, true},
		{"a lock acquire span with its wait and key shows it", []jaegerSpan{span("process orders"), span("lock acquire", key, wait)}, true},
		{"a span with a wait but no key does not", []jaegerSpan{span("process orders", wait)}, false},
		{"an event with the wait and the key shows it", []jaegerSpan{withEvent(span("process orders"), wait, key)}, true},
		{"an event with the wait on a span with the key shows it", []jaegerSpan{withEvent(span("process orders", key), wait)}, true},
		{"an event with the wait alone does not (decided in a batch, today)", []jaegerSpan{withEvent(span("process orders"), wait)}, false},
		{"a consumer span alone does not (an elided lock, today)", []jaegerSpan{span("process orders", key)}, false},
	} {
		if got := traceShowsLockWait(c.spans); got != c.want {
			t.Errorf("%s: traceShowsLockWait = %v", c.name, got)
		}
	}
}
