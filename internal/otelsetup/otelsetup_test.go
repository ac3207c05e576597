package otelsetup_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/testkit/redistest"
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

// meters is the meter provider of the test process, set up as the worker's (Prometheus on /metrics, the
// runtime metrics), plus a manual reader. The instruments of lockmw, inventory, stream and the worker are
// package variables, made from the global meter provider before any test runs, and OpenTelemetry ties
// them to the first provider set: a test that set its own would see no measurements when it ran after
// another that set one, or a second time (-count=2). TestMain sets this one first; a test compares what
// it collects before and after its run.
var meters struct {
	reader  *sdkmetric.ManualReader
	handler http.Handler // what the worker binary serves on /metrics
}

func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			os.Unsetenv(k)
		}
	}
	meters.reader = sdkmetric.NewManualReader()
	tel, err := otelsetup.SetupWithReader(context.Background(), "test", meters.reader)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	meters.handler = tel.Metrics
	os.Exit(m.Run())
}

// restoreGlobals puts the global tracer provider and propagator back as the test found them.
func restoreGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != tp { // setting the one in place again logs an error
			otel.SetTracerProvider(tp)
		}
		otel.SetTextMapPropagator(prop)
	})
}

func TestNothingConfiguredExportsNothing(t *testing.T) {
	unsetOTel(t)
	restoreGlobals(t)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) // passes nothing on
	otel.SetTracerProvider(sdktrace.NewTracerProvider())                   // Setup replaces it
	mp := otel.GetMeterProvider()
	before, beforeOTel := runtime.NumGoroutine(), len(otelGoroutines())
	tel, err := otelsetup.Setup(context.Background(), "test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Tracing || tel.Metrics != nil {
		t.Fatalf("tracing %v, metrics %v: want neither with nothing configured", tel.Tracing, tel.Metrics)
	}
	if got, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
		t.Fatalf("tracer provider %T with nothing configured, want the no-op one (spans cost nothing)", got)
	}
	if got := otel.GetMeterProvider(); got != mp {
		t.Fatalf("a meter provider (%T) was installed with nothing configured", got)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines after Setup, %d before: an exporter started", after, before)
	}
	if after := otelGoroutines(); len(after) > beforeOTel {
		t.Fatalf("OpenTelemetry goroutines after Setup, %d before: an exporter started:\n%s", beforeOTel, strings.Join(after, "\n\n"))
	}
	// Trace context is still passed on from message to message.
	if fields := otel.GetTextMapPropagator().Fields(); !slices.Contains(fields, "traceparent") || !slices.Contains(fields, "baggage") {
		t.Fatalf("propagator fields %q, want the W3C trace context and baggage", fields)
	}
}

// otelGoroutines are the stacks of the goroutines that run OpenTelemetry SDK or exporter code (a batch
// span processor, a periodic metric reader, an exporter's connection).
func otelGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "go.opentelemetry.io/otel/sdk") || strings.Contains(g, "go.opentelemetry.io/otel/exporters") ||
			strings.Contains(g, "google.golang.org/grpc") {
			out = append(out, g)
		}
	}
	return out
}

func TestOneTracePerOrder(t *testing.T) {
	unsetOTel(t)
	restoreGlobals(t)
	waitsBefore, _ := lockWaitHistogram(t)
	// Nothing configured: the propagator and the no-op tracer provider, which the test's recorder replaces.
	tel, err := otelsetup.Setup(context.Background(), "test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))

	// With persistence: after the restart the group is there and the worker ready at once. (Without, it
	// is not ready until an order recreates the stream: internal/e2e TestLostConsumerGroupIsRecreated.)
	s := redistest.Start(t, redistest.WithPersistence())
	cfg := workerConfig(t, s)
	cfg.MetricsAddr = freeAddr(t)
	cfg.TraceRedis = true
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		worker.Options{Metrics: meters.handler, Tracing: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer stop()

	// 200 orders on one SKU and 8 consumers: orders wait for the lock.
	var pcfg producer.Config
	pcfg.Config = cfg.Config
	pcfg.Orders, pcfg.SKUList, pcfg.Quantity, pcfg.Distribution, pcfg.SeedStock = 200, "HOT", 1, "uniform", 150
	pcfg.Wait, pcfg.Timeout = true, time.Minute
	sum, err := producer.Run(context.Background(), pcfg, nil)
	if err != nil || !sum.Consistent {
		t.Fatalf("producer: %v %+v", err, sum)
	}

	body := get(t, "http://"+cfg.MetricsAddr+"/metrics", http.StatusOK)
	for _, name := range []string{"stockflow_lock_wait_seconds_bucket", "stockflow_orders_total", "stockflow_messages_in_flight"} {
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
	var acquires, processes []sdktrace.ReadOnlySpan
	traces, redisSpans, waitSpans := 0, 0, 0
	for _, sp := range ended {
		switch sp.Name() {
		case "send orders":
			traces++
			checkMessaging(t, sp, trace.SpanKindProducer, semconv.MessagingOperationName("send"),
				semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName("orders"))
		case "lock acquire":
			acquires = append(acquires, sp)
			checkParent(t, sp, byID, "process orders")
			for _, k := range []string{"rlock.key", "rlock.mode", "rlock.wait.seconds", "rlock.attempts", "rlock.reentry", "rlock.fencing_token", "rlock.result"} {
				if _, ok := attr(sp, k); !ok {
					t.Fatalf("lock acquire span lacks %s: %v", k, sp.Attributes())
				}
			}
		case lockmw.SpanWait:
			checkParent(t, sp, byID, "process orders")
			if key, _ := attr(sp, "stockflow.lock.key"); key.AsString() != "HOT" {
				t.Fatalf("lock wait span without the lock key: %v", sp.Attributes())
			}
			waitSpans++
		case inventory.SpanReserveBatch:
			checkParent(t, sp, byID, "process orders")
			for _, k := range []attribute.Key{inventory.AttrSKU, inventory.AttrBatchSize, inventory.AttrFence} {
				if _, ok := attr(sp, string(k)); !ok {
					t.Fatalf("stock reserve batch span lacks %s: %v", k, sp.Attributes())
				}
			}
		case "send order-results":
			checkParent(t, sp, byID, "process orders")
			checkMessaging(t, sp, trace.SpanKindProducer, semconv.MessagingOperationName("send"),
				semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName("order-results"))
		case "process orders":
			// The producer's span is the parent, across processes in real life: found by trace context.
			checkParent(t, sp, byID, "send orders")
			checkMessaging(t, sp, trace.SpanKindConsumer, semconv.MessagingOperationName("process"),
				semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName("orders"),
				semconv.MessagingConsumerGroupName(cfg.ConsumerGroup))
			checkProcess(t, sp)
			processes = append(processes, sp)
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
	// Every order shows its wait for its SKU on its process span, whatever the path it took (with the
	// default settings: lock elision on), and the histogram holds exactly those waits: one per order.
	paths := map[string]int{}
	for _, sp := range processes {
		key, _ := attr(sp, "stockflow.lock.key")
		path, _ := attr(sp, "stockflow.lock.path")
		if _, ok := attr(sp, "stockflow.lock.wait.seconds"); !ok || key.AsString() != "HOT" || path.AsString() == "" {
			t.Fatalf("process span without the order's lock wait, key and path: %v", sp.Attributes())
		}
		paths[path.AsString()]++
	}
	if traces != 200 || len(processes) != 200 || waitSpans != 200 || paths["batched"] == 0 || paths["batched"] == 200 {
		t.Fatalf("%d publish spans, %d process spans, %d lock wait spans, paths %v: want 200 orders, each with its lock wait, some decided in a batch, some leading",
			traces, len(processes), waitSpans, paths)
	}
	t.Logf("paths of the 200 orders: %v; %d lock acquire spans", paths, len(acquires))

	// The histogram holds exactly the waits the spans report: what it gained during this test.
	hist, found := lockWaitHistogram(t)
	if !found {
		t.Fatal("no stockflow.lock.wait histogram")
	}
	hist = histogramSince(hist, waitsBefore)
	if hist.Count != uint64(len(processes)) {
		t.Fatalf("histogram count %d, orders %d", hist.Count, len(processes))
	}
	wantBuckets := make([]uint64, len(hist.Bounds)+1)
	waited := 0
	for _, sp := range processes {
		v, _ := attr(sp, "stockflow.lock.wait.seconds")
		i := 0
		for i < len(hist.Bounds) && v.AsFloat64() > hist.Bounds[i] {
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
		t.Fatal("no order waited over 1 ms for the hot SKU: the test made no contention")
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

// checkMessaging fails unless the span is of the kind and has the attributes of a messaging span on a
// Redis stream: want, messaging.system and the server's address.
func checkMessaging(t *testing.T, sp sdktrace.ReadOnlySpan, kind trace.SpanKind, want ...attribute.KeyValue) {
	t.Helper()
	if sp.SpanKind() != kind {
		t.Fatalf("span %q is of kind %v, want %v", sp.Name(), sp.SpanKind(), kind)
	}
	for _, kv := range append(want, semconv.MessagingSystemKey.String("redis"), semconv.ServerAddress("127.0.0.1")) {
		if v, ok := attr(sp, string(kv.Key)); !ok || v != kv.Value {
			t.Fatalf("span %q: %s = %v, want %v (attributes %v)", sp.Name(), kv.Key, v.Emit(), kv.Value.Emit(), sp.Attributes())
		}
	}
	if _, ok := attr(sp, string(semconv.ServerPortKey)); !ok {
		t.Fatalf("span %q has no %s", sp.Name(), semconv.ServerPortKey)
	}
}

// checkProcess fails unless a process span names the stream entry (its ID) and the consumer, and links to
// the span that sent the message, its parent.
func checkProcess(t *testing.T, sp sdktrace.ReadOnlySpan) {
	t.Helper()
	id, _ := attr(sp, string(semconv.MessagingMessageIDKey))
	client, _ := attr(sp, string(semconv.MessagingClientIDKey))
	if !regexp.MustCompile(`^\d+-\d+$`).MatchString(id.AsString()) || client.AsString() != "t" {
		t.Fatalf("process span: message id %q, client id %q; want a stream entry id and a consumer of worker t", id.AsString(), client.AsString())
	}
	if l := sp.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != sp.Parent().SpanID() {
		t.Fatalf("process span links %v, want one to its parent, the send span", l)
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

// lockWaitHistogram collects the lock wait histogram of the process, its data points added up; found is
// false before the first lock wait.
func lockWaitHistogram(t *testing.T) (out metricdata.HistogramDataPoint[float64], found bool) {
	var rm metricdata.ResourceMetrics
	if err := meters.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
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
	return out, found
}

// histogramSince is what the cumulative histogram now gained since before.
func histogramSince(now, before metricdata.HistogramDataPoint[float64]) metricdata.HistogramDataPoint[float64] {
	now.Count -= before.Count
	now.BucketCounts = slices.Clone(now.BucketCounts)
	for i := range before.BucketCounts {
		now.BucketCounts[i] -= before.BucketCounts[i]
	}
	return now
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
