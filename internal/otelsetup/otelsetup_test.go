package otelsetup_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/redistest"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/lockmw"
)

// unsetOTel clears the OTEL_ variables of the environment for the test.
func unsetOTel(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// This test must run before TestOneTracePerOrder installs global providers.
func TestNothingConfiguredExportsNothing(t *testing.T) {
	unsetOTel(t)
	before := runtime.NumGoroutine()
	tel, err := otelsetup.Setup(context.Background(), "test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Tracing || tel.Metrics != nil {
		t.Fatalf("tracing %v, metrics %v: want neither with nothing configured", tel.Tracing, tel.Metrics)
	}
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
		t.Fatal("an SDK tracer provider was installed with nothing configured")
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines after Setup, %d before: an exporter started", after, before)
	}
}

func TestOneTracePerOrder(t *testing.T) {
	unsetOTel(t)
	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	manual := sdkmetric.NewManualReader()
	reg := prom.NewRegistry()
	promExp, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(manual), sdkmetric.WithReader(promExp)))
	tel, err := otelsetup.Setup(context.Background(), "test", false) // only the propagator: nothing configured
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	// With persistence: after the restart the group is there and the worker ready at once. (Without, it
	// is not ready until an order recreates the stream: internal/e2e TestLostConsumerGroupIsRecreated.)
	s := redistest.Start(t, redistest.WithPersistence())
	cfg := workerConfig(t, s)
	cfg.MetricsAddr = freeAddr(t)
	cfg.TraceRedis = true
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		worker.Options{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Tracing: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer stop()

	// 200 orders on one SKU and 8 consumers: orders wait for the lock.
	var pcfg producer.Config
	pcfg.Streams = cfg.Streams
	pcfg.Orders, pcfg.SKUList, pcfg.Quantity, pcfg.Distribution, pcfg.SeedStock = 200, "HOT", 1, "uniform", 150
	pcfg.Wait, pcfg.Timeout = true, time.Minute
	sum, err := producer.Run(context.Background(), pcfg, nil)
	if err != nil || !sum.Consistent {
		t.Fatalf("producer: %v %+v", err, sum)
	}

	body := get(t, "http://"+cfg.MetricsAddr+"/metrics", http.StatusOK)
	for _, name := range []string{"stockflow_lock_wait_seconds_bucket", "stockflow_lock_hold_seconds", "stockflow_orders_total", "stockflow_messages_in_flight"} {
		if !strings.Contains(body, name) {
			t.Fatalf("/metrics lacks %s", name)
		}
	}

	get(t, "http://"+cfg.MetricsAddr+"/readyz", http.StatusOK)
	s.Kill()
	get(t, "http://"+cfg.MetricsAddr+"/readyz", http.StatusServiceUnavailable)
	s.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for code := 0; code != http.StatusOK; {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not ready again after Redis restarted")
		}
		time.Sleep(50 * time.Millisecond)
		resp, err := http.Get("http://" + cfg.MetricsAddr + "/readyz")
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
	}

	// Every span has ended once the worker stopped.
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended := spans.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range ended {
		byID[sp.SpanContext().SpanID()] = sp
	}
	var acquires []sdktrace.ReadOnlySpan
	traces, redisSpans := 0, 0
	for _, sp := range ended {
		switch sp.Name() {
		case "orders publish":
			traces++
		case "lock acquire":
			acquires = append(acquires, sp)
			checkParent(t, sp, byID, "orders process")
			for _, k := range []string{"lock.key", "lock.mode", "lock.wait.seconds", "lock.attempts", "lock.reentry", "lock.fencing_token", "lock.result"} {
				if _, ok := attr(sp, k); !ok {
					t.Fatalf("lock acquire span lacks %s: %v", k, sp.Attributes())
				}
			}
		case "stock reserve":
			checkParent(t, sp, byID, "orders process")
			for _, k := range []string{"stock.sku", "stock.quantity", "stock.outcome", "stock.fence"} {
				if _, ok := attr(sp, k); !ok {
					t.Fatalf("stock reserve span lacks %s: %v", k, sp.Attributes())
				}
			}
		case "order-results publish":
			checkParent(t, sp, byID, "orders process")
		case "orders process":
			// The producer's span is the parent, across processes in real life: found by trace context.
			checkParent(t, sp, byID, "orders publish")
			if v, _ := attr(sp, "messaging.destination.name"); v.AsString() != "orders" {
				t.Fatalf("process span destination %v", v)
			}
		}
		if v, ok := attr(sp, "db.system"); ok && v.AsString() == "redis" {
			redisSpans++
			for _, kv := range sp.Attributes() {
				if k := string(kv.Key); k == "db.statement" || k == "db.query.text" || strings.Contains(kv.Value.Emit(), "HOT") {
					t.Fatalf("redis span %q carries a command argument: %s=%s", sp.Name(), k, kv.Value.Emit())
				}
			}
		}
	}
	if redisSpans == 0 {
		t.Fatal("no Redis spans recorded: the client is not instrumented")
	}
	if traces != 200 || len(acquires) != 200 {
		t.Fatalf("%d publish spans and %d lock acquire spans, want 200 each", traces, len(acquires))
	}

	// The histogram holds exactly the waits the spans report.
	var rm metricdata.ResourceMetrics
	if err := manual.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	hist := lockWaitHistogram(t, rm)
	if hist.Count != uint64(len(acquires)) {
		t.Fatalf("histogram count %d, lock acquisitions %d", hist.Count, len(acquires))
	}
	wantBuckets := make([]uint64, len(lockmw.WaitBuckets)+1)
	waited := 0
	for _, sp := range acquires {
		v, _ := attr(sp, "lock.wait.seconds")
		i := 0
		for i < len(lockmw.WaitBuckets) && v.AsFloat64() > lockmw.WaitBuckets[i] {
			i++
		}
		wantBuckets[i]++
		if v.AsFloat64() > 0.001 {
			waited++
		}
	}
	for i := range wantBuckets {
		if hist.BucketCounts[i] != wantBuckets[i] {
			t.Fatalf("histogram buckets %v, span waits fall in %v", hist.BucketCounts, wantBuckets)
		}
	}
	if waited == 0 {
		t.Fatal("no order waited over 1 ms for the hot SKU's lock: the test made no contention")
	}

}

func workerConfig(t *testing.T, s *redistest.Server) worker.Config {
	var cfg worker.Config
	set := config.NewSet("worker", func(string) (string, bool) { return "", false })
	worker.Flags(set, &cfg)
	if err := set.Parse([]string{"--redis-url", s.URL(), "--worker-concurrency", "8", "--worker-name", "t"}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func checkParent(t *testing.T, sp sdktrace.ReadOnlySpan, byID map[trace.SpanID]sdktrace.ReadOnlySpan, want string) {
	t.Helper()
	parent, ok := byID[sp.Parent().SpanID()]
	if !ok || parent.Name() != want || parent.SpanContext().TraceID() != sp.SpanContext().TraceID() {
		t.Fatalf("span %q: parent %v, want %q in the same trace", sp.Name(), sp.Parent().SpanID(), want)
	}
}

func attr(sp sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func lockWaitHistogram(t *testing.T, rm metricdata.ResourceMetrics) metricdata.HistogramDataPoint[float64] {
	var out metricdata.HistogramDataPoint[float64]
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "stockflow.lock.wait" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if !found {
					out, found = dp, true
					continue
				}
				out.Count += dp.Count
				for i := range dp.BucketCounts {
					out.BucketCounts[i] += dp.BucketCounts[i]
				}
			}
		}
	}
	if !found {
		t.Fatal("no stockflow.lock.wait histogram")
	}
	return out
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, want)
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
