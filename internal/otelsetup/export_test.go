package otelsetup

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// SetupWithReader is Setup with prometheus and one more metric reader, which a test collects from.
func SetupWithReader(ctx context.Context, service string, r sdkmetric.Reader) (*Telemetry, error) {
	return setup(ctx, service, true, []sdkmetric.Reader{r})
}
