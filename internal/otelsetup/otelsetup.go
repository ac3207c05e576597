// Package otelsetup sets up OpenTelemetry for the stockflow binaries from the standard environment
// variables. Only the mains import it: it links the exporters (OTLP over HTTP and gRPC, Prometheus), which
// the libraries and the demo do without (redisstream has what they need).
//
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES      resource
//	OTEL_TRACES_EXPORTER  = otlp | console | none     default none: no spans are exported
//	OTEL_METRICS_EXPORTER = otlp | console | prometheus | none   default none
//	OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf | grpc), ...
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG      read by the SDK (default parentbased_always_on)
//	OTEL_METRICS_EXEMPLAR_FILTER = trace_based | always_on | always_off   read by the SDK (default trace_based)
//
// With nothing set, nothing is exported and no exporter goroutine runs: the global providers stay the
// no-op ones, and trace context is still passed on from message to message.
//
// Metrics, when exported, include the Go runtime's (go.goroutine.count, go.memory.used, ...: the contrib
// runtime instrumentation). Measurements taken in the context of a sampled span carry it as an exemplar
// (trace_based), so a bucket of the lock wait histogram leads to a trace that waited; /metrics shows the
// exemplars to a scraper that asks for OpenMetrics (Prometheus does), and adds the process_* series.
package otelsetup

import (
	"context"
	"errors"
	"net/http"
	"os"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry is the set-up of one process.
type Telemetry struct {
	// Metrics serves /metrics: the Prometheus text format, or OpenMetrics with exemplars to a scraper that
	// asks for it; nil unless asked for.
	Metrics http.Handler
	// Tracing: spans are exported (OTEL_TRACES_EXPORTER is set and not none).
	Tracing  bool
	shutdown []func(context.Context) error
	readers  []sdkmetric.Reader // more metric readers (the tests')
}

// Setup installs the global tracer and meter providers configured by the environment, and the W3C trace
// context propagator. With prometheus, Metrics serves every metric for a /metrics endpoint. Shutdown
// flushes what is buffered.
func Setup(ctx context.Context, service string, prometheus bool) (*Telemetry, error) {
	return setup(ctx, service, prometheus, nil)
}

// setup is Setup with more metric readers, which install a meter provider even with nothing configured.
func setup(ctx context.Context, service string, prometheus bool, readers []sdkmetric.Reader) (*Telemetry, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t := &Telemetry{readers: readers}
	if err := t.setup(ctx, service, prometheus); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx)) // a tracer provider may be installed already
	}
	return t, nil
}

func (t *Telemetry) setup(ctx context.Context, service string, prometheus bool) error {
	res, err := serviceResource(service)
	if err != nil {
		return err
	}
	if err := t.setupTracing(ctx, res); err != nil {
		return err
	}
	return t.setupMetrics(ctx, res, prometheus)
}

// serviceResource is the SDK's default resource, which reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, named service when OTEL_SERVICE_NAME is not set.
func serviceResource(service string) (*resource.Resource, error) {
	if os.Getenv("OTEL_SERVICE_NAME") != "" {
		return resource.Default(), nil
	}
	return resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
}

// setupTracing installs an SDK tracer provider when OTEL_TRACES_EXPORTER names an exporter, and the no-op
// one otherwise: a span then costs nothing (OpenTelemetry's default provider allocates one for every span
// started, three per order), and the trace context an order carries still reaches its outcome event.
func (t *Telemetry) setupTracing(ctx context.Context, res *resource.Resource) error {
	spans, err := autoexport.NewSpanExporter(ctx, autoexport.WithFallbackSpanExporter(none[sdktrace.SpanExporter]))
	if err != nil {
		return err
	}
	if !exporting(spans, autoexport.IsNoneSpanExporter) {
		otel.SetTracerProvider(noop.NewTracerProvider())
		return nil
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	t.Tracing = true
	t.shutdown = append(t.shutdown, tp.Shutdown)
	return nil
}

// setupMetrics installs an SDK meter provider, with the Go runtime metrics, when OTEL_METRICS_EXPORTER
// names an exporter or prometheus is asked for.
func (t *Telemetry) setupMetrics(ctx context.Context, res *resource.Resource, prometheus bool) error {
	readers, err := t.metricReaders(ctx, prometheus)
	if err != nil || len(readers) == 0 {
		return err
	}
	mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	otel.SetMeterProvider(mp)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	return runtime.Start(runtime.WithMeterProvider(mp))
}

// metricReaders are the reader OTEL_METRICS_EXPORTER names, if any, and with prometheus the one that
// Metrics serves.
func (t *Telemetry) metricReaders(ctx context.Context, prometheus bool) ([]sdkmetric.Option, error) {
	readers, err := envMetricReader(ctx)
	for _, r := range t.readers {
		readers = append(readers, sdkmetric.WithReader(r))
	}
	if err != nil || !prometheus {
		return readers, err
	}
	exp, err := t.prometheusReader()
	if err != nil {
		return nil, err
	}
	return append(readers, sdkmetric.WithReader(exp)), nil
}

func envMetricReader(ctx context.Context) ([]sdkmetric.Option, error) {
	reader, err := autoexport.NewMetricReader(ctx, autoexport.WithFallbackMetricReader(none[sdkmetric.Reader]))
	if err != nil || !exporting(reader, autoexport.IsNoneMetricReader) {
		return nil, err
	}
	return []sdkmetric.Option{sdkmetric.WithReader(reader)}, nil
}

// prometheusReader makes a Prometheus exporter on a registry of its own, which Metrics serves, with the
// process_* series (CPU, memory, file descriptors of the process). The Go runtime comes once, from the OTel
// runtime instrumentation (go_goroutine_count, go_memory_used_bytes...), which reaches OTLP too; the
// Prometheus client's Go collector (go_goroutines, go_memstats_*...) would show the same runtime a second
// time under other names.
func (t *Telemetry) prometheusReader() (sdkmetric.Reader, error) {
	reg := prom.NewRegistry()
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	exp, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	// Exemplars exist only in OpenMetrics: the handler speaks it to a scraper that asks for it.
	t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	return exp, nil
}

// exporting reports whether autoexport made an exporter: nil is the fallback of an unset variable, and
// isNone recognises the value none.
func exporting[T any](exporter T, isNone func(T) bool) bool {
	return any(exporter) != nil && !isNone(exporter)
}

// none is the fallback of autoexport when its variable is not set: no exporter, rather than OTLP.
func none[T any](context.Context) (T, error) {
	var zero T
	return zero, nil
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
