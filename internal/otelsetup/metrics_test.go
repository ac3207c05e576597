package otelsetup_test

import (
	"context"
	"fmt"
	"github.com/ThreeDotsLabs/watermill/message"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// runWorker runs a worker on s with /metrics served by the test process's handler (the binary's), until
// the test ends.
func runWorker(t *testing.T, s *redistest.Server, cfg worker.Config, faults ...*worker.Faults) {
	t.Helper()
	opts := worker.Options{Metrics: meters.handler, Tracing: true}
	if len(faults) > 0 {
		opts.Faults = faults[0]
	}
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// scrapeOpenMetrics scrapes /metrics as Prometheus does, asking for OpenMetrics, which alone carries
// exemplars.
// waitServing waits until the worker's HTTP server at addr answers.
func waitServing(t *testing.T, addr string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the worker's HTTP server at %s does not answer: %v", addr, err)
		}
	}
}

func scrapeOpenMetrics(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("/metrics answered %d %q to a scraper asking for OpenMetrics", resp.StatusCode, ct)
	}
	return string(b)
}

// sample is the value of the first sample of the series name whose labels contain every one of labels
// (`pool_name="main"`).
func sample(body, name string, labels ...string) (float64, bool) {
	for line := range strings.Lines(body) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		set, value, _ := strings.Cut(rest, "} ")
		if rest[0] == ' ' {
			set, value = "", rest[1:]
		}
		if !containsAll(set, labels) {
			continue
		}
		value, _, _ = strings.Cut(strings.TrimSpace(value), " ")
		f, err := strconv.ParseFloat(value, 64)
		return f, err == nil
	}
	return 0, false
}

// sum adds up the samples of name whose labels contain labels (every series of a metric, say).
func sum(body, name string, labels ...string) float64 {
	total := 0.0
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			if v, ok := sample(line, name, labels...); ok {
				total += v
			}
		}
	}
	return total
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

var exemplar = regexp.MustCompile(`(?m)^stockflow_lock_wait_seconds_bucket\{(.*)\} \d+ # \{(.*)\} \S+`)

// Every order counts once in the lock wait histogram on /metrics, with the default settings (lock elision
// on), by path; its buckets carry exemplars naming the order's process span (and its trace) on every path
// seen; /metrics also shows the Go runtime, the process and the Redis connection pools.
func TestLockWaitCountsEveryOrderAndLinksToItsTrace(t *testing.T) {
	unsetOTel(t)
	restoreGlobals(t)
	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	s := redistest.Start(t)
	cfg := workerConfig(t, s)
	cfg.MetricsAddr = freeAddr(t)
	runWorker(t, s, cfg)

	waitServing(t, cfg.MetricsAddr)
	before := scrapeOpenMetrics(t, cfg.MetricsAddr) // the instruments are global: other runs counted too
	var pcfg producer.Config
	pcfg.Config = cfg.Config
	pcfg.Orders, pcfg.SKUList, pcfg.Quantity, pcfg.Distribution, pcfg.SeedStock = 40, "HOT,COLD", 1, "uniform", 100
	pcfg.Wait, pcfg.Timeout = true, time.Minute
	if sum, err := producer.Run(context.Background(), pcfg, nil); err != nil || !sum.Consistent {
		t.Fatalf("producer: %v %+v", err, sum)
	}
	// Every order's wait is counted once, just after its outcome was published: the scrape may come first.
	count := func(body string) float64 { return sum(body, "stockflow_lock_wait_seconds_count") }
	body := scrapeOpenMetrics(t, cfg.MetricsAddr)
	for end := time.Now().Add(2 * time.Second); count(body)-count(before) < 40 && time.Now().Before(end); {
		body = scrapeOpenMetrics(t, cfg.MetricsAddr)
	}
	if n := count(body) - count(before); n != 40 {
		t.Errorf("stockflow_lock_wait_seconds counts %v orders, want 40: one per order, whatever its path", n)
	}

	orders := map[string]bool{} // "trace id/span id" of the orders' process spans
	for _, sp := range spans.Ended() {
		if sp.Name() == "process orders" {
			orders[sp.SpanContext().TraceID().String()+"/"+sp.SpanContext().SpanID().String()] = true
		}
	}
	linked := map[string]int{} // by path
	for _, m := range exemplar.FindAllStringSubmatch(body, -1) {
		path := labelsOf(m[1])["stockflow_lock_path"]
		ex := labelsOf(m[2])
		if orders[ex["trace_id"]+"/"+ex["span_id"]] {
			linked[path]++
		}
	}
	if len(orders) != 40 || linked["elided"] == 0 || linked["batched"]+linked["elided"] < 2 {
		t.Fatalf("%d order spans; exemplars of stockflow_lock_wait_seconds naming one of them, by path: %v; want some on the elided and batched paths:\n%s",
			len(orders), linked, grep(body, "stockflow_lock_wait_seconds_bucket"))
	}
	t.Logf("buckets linking to this test's orders, by path: %v", linked)
	checkSeries(t, body)
}

// labelsOf parses the labels of a Prometheus sample or exemplar: a="x",b="y".
func labelsOf(s string) map[string]string {
	labels := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = strings.Trim(v, `"`)
	}
	return labels
}

// checkSeries fails unless /metrics shows the runtime, process and connection pool series, the pools by name.
func checkSeries(t *testing.T, body string) {
	t.Helper()
	for _, name := range []string{"go_goroutine_count", "go_memory_used_bytes", "go_memory_allocated_bytes_total",
		"go_processor_limit", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} {
		if v, ok := sample(body, name); !ok || v <= 0 {
			t.Errorf("/metrics: %s = %v (found %v), want a positive value", name, v, ok)
		}
	}
	// go-redis's default pool size for the main client; the subscriber's reads, claims and prunes: 4.
	for pool, size := range map[string]float64{"main": 10 * float64(runtime.GOMAXPROCS(0)), "subscribers": 4} {
		if v, ok := sample(body, "db_client_connections_max", `pool_name="`+pool+`"`); !ok || v != size {
			t.Errorf("/metrics: db_client_connections_max{pool_name=%q} = %v (found %v), want %v", pool, v, ok, size)
		}
		for _, state := range []string{"idle", "used"} {
			if _, ok := sample(body, "db_client_connections_usage", `pool_name="`+pool+`"`, `state="`+state+`"`); !ok {
				t.Errorf("/metrics lacks db_client_connections_usage{pool_name=%q,state=%q}", pool, state)
			}
		}
	}
	if _, ok := sample(body, "db_client_connections_use_time_milliseconds_count", `pool_name="main"`); !ok {
		t.Error("/metrics lacks db_client_connections_use_time_milliseconds for the main pool")
	}
}

// The backlog gauges show on /metrics what the group has: entries pending (delivered, not acked) and
// not yet delivered, and the age of the oldest pending one; all back to 0 once the orders are done.
func TestBacklogGaugesShowWhatTheGroupHolds(t *testing.T) {
	unsetOTel(t)
	s := redistest.Start(t)
	cfg := workerConfig(t, s)
	cfg.MetricsAddr = freeAddr(t)
	// One consumer, each order held 300 ms, the backlog refreshed every second (STREAM_RETENTION/4).
	cfg.Concurrency, cfg.StreamRetention = 1, 4*time.Second
	runWorker(t, s, cfg, holdEachOrder(300*time.Millisecond))
	waitServing(t, cfg.MetricsAddr) // the worker starts serving in its own goroutine
	rdb, ctx := s.Client(), context.Background()
	if err := rdb.HSet(ctx, "stock:{K}", "available", 100).Err(); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, cfg.MetricsAddr, 5*time.Second, "the worker reports its empty group",
		func(b backlog) bool { return b.pending+b.lag+b.age == 0 })
	const orders = 10
	for i := range orders {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload",
			fmt.Sprintf(`{"order_id":"o-%d","sku":"K","quantity":1}`, i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The consumer reads a few entries ahead; the others wait undelivered.
	waitMetrics(t, cfg.MetricsAddr, 3*time.Second, "orders both pending and undelivered while the first ones are handled",
		func(b backlog) bool { return b.pending >= 1 && b.lag >= 1 && b.pending+b.lag <= orders && b.age > 0 })
	waitMetrics(t, cfg.MetricsAddr, 10*time.Second, "nothing pending nor undelivered once the orders are done",
		func(b backlog) bool { return b.pending+b.lag+b.age == 0 })
	if n, _ := rdb.XLen(ctx, "order-results").Result(); n != orders {
		t.Fatalf("%d outcomes for %d orders", n, orders)
	}
}

type backlog struct {
	found        bool
	pending, lag float64
	age          float64 // oldest pending, seconds
	scraped      string
}

// waitMetrics scrapes /metrics until the backlog gauges satisfy ok, or fails after timeout.
func waitMetrics(t *testing.T, addr string, timeout time.Duration, what string, ok func(backlog) bool) {
	t.Helper()
	var b backlog
	var found bool
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		body := scrapeOpenMetrics(t, addr)
		var p, l, a bool
		b.pending, p = sample(body, "stockflow_messages_pending")
		b.lag, l = sample(body, "stockflow_consumer_lag")
		b.age, a = sample(body, "stockflow_messages_oldest_pending_age_seconds")
		if found = p && l && a; found && ok(b) {
			return
		}
	}
	t.Fatalf("%s: not within %v; last pending %v, lag %v, oldest age %v (all three on /metrics: %v)", what, timeout, b.pending, b.lag, b.age, found)
}

func grep(body, prefix string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// holdEachOrder are fault hooks that hold each order d inside its lock.
func holdEachOrder(d time.Duration) *worker.Faults {
	return &worker.Faults{NoElision: true, Handler: func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			time.Sleep(d)
			return h(msg)
		}
	}}
}
