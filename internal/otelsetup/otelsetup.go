// Package otelsetup sets up OpenTelemetry for the stockflow binaries from the standard environment
// variables. Only the mains import it: it links the exporters (OTLP over HTTP and gRPC, Prometheus), which
// the libraries and the demo do without (internal/telemetry has what they need).
//
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES      resource
//	OTEL_TRACES_EXPORTER  = otlp | console | none     default none: no spans are exported
//	OTEL_METRICS_EXPORTER = otlp | console | prometheus | none   default none
//	OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf | grpc), ...
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG      read by the SDK (default parentbased_always_on)
//
// With nothing set, nothing is exported and no exporter goroutine runs: the global providers stay the
// no-op ones, and trace context is still passed on from message to message.
package otelsetup

import (
	"context"
	"errors"
	"net/http"
	"os"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Telemetry is the set-up of one process.
type Telemetry struct {
	// Metrics serves the Prometheus text format, nil unless asked for.
	Metrics http.Handler
	// Tracing: spans are exported (OTEL_TRACES_EXPORTER is set and not none).
	Tracing  bool
	shutdown []func(context.Context) error
}

// Setup installs the global tracer and meter providers configured by the environment, and the W3C trace
// context propagator. With prometheus, Metrics serves every metric for a /metrics endpoint. Shutdown
// flushes what is buffered.
func Setup(ctx context.Context, service string, prometheus bool) (*Telemetry, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	res := resource.Default()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		var err error
		if res, err = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", service))); err != nil {
			return nil, err
		}
	}
	t := &Telemetry{}

	spans, err := autoexport.NewSpanExporter(ctx, autoexport.WithFallbackSpanExporter(none[sdktrace.SpanExporter]))
	if err != nil {
		return nil, err
	}
	if spans != nil && !autoexport.IsNoneSpanExporter(spans) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
		otel.SetTracerProvider(tp)
		t.Tracing = true
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}

	var readers []sdkmetric.Option
	reader, err := autoexport.NewMetricReader(ctx, autoexport.WithFallbackMetricReader(none[sdkmetric.Reader]))
	if err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	if reader != nil && !autoexport.IsNoneMetricReader(reader) {
		readers = append(readers, sdkmetric.WithReader(reader))
	}
	if prometheus {
		reg := prom.NewRegistry()
		exp, err := promexporter.New(promexporter.WithRegisterer(reg))
		if err != nil {
			return nil, errors.Join(err, t.Shutdown(ctx))
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if len(readers) > 0 {
		mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(mp)
		t.shutdown = append(t.shutdown, mp.Shutdown)
	}
	return t, nil
}

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
