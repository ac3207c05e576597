package worker

import (
	"errors"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/internal/stream"
)

var (
	meter       = otel.Meter("github.com/stockflow/stockflow/internal/worker")
	inFlight, _ = meter.Int64UpDownCounter("stockflow.messages.in_flight",
		metric.WithDescription("Order messages being handled."))
	retried, _ = meter.Int64Counter("stockflow.messages.retried",
		metric.WithDescription("Failed attempts handed back for a retry, by failure (transient, permanent)."))
	pendingGauge, _ = meter.Int64ObservableGauge("stockflow.messages.pending",
		metric.WithDescription("Entries delivered to the consumer group and not acked yet."))
	lagGauge, _ = meter.Int64ObservableGauge("stockflow.consumer.lag",
		metric.WithDescription("Entries of the orders stream not yet delivered to the consumer group."))
	oldestPendingAge, _ = meter.Float64ObservableGauge("stockflow.messages.oldest_pending_age",
		metric.WithUnit("s"),
		metric.WithDescription("Age (since it was published) of the oldest entry still pending in the group; 0 when none is."))
	// orderWait is every order's wait for its SKU: stockflow.lock.wait counts only the lock acquisitions of
	// the orders that led a batch, not the orders decided in their batches.
	orderWait, _ = meter.Float64Histogram("stockflow.order.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from a consumer taking an order until its stock was decided: its lock wait, or its wait for the batch of another order of its SKU (combined)."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
)

// Attributes of the counters above.
var (
	reasonBadInput   = stream.PoisonReason("bad_input")
	reasonPanic      = stream.PoisonReason("panic")
	reasonFailed     = stream.PoisonReason("failed")
	reasonAttempts   = stream.PoisonReason("attempts")
	failureTransient = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "transient")))
	failurePermanent = metric.WithAttributeSet(attribute.NewSet(attribute.String("failure", "permanent")))
	waitLed          = metric.WithAttributeSet(attribute.NewSet(attribute.Bool("stockflow.order.combined", false)))
	waitCombined     = metric.WithAttributeSet(attribute.NewSet(attribute.Bool("stockflow.order.combined", true)))
)

// Pool names (pool.name) of the worker's Redis clients in the connection pool metrics; a Redlock master's
// is "redlock " and its address.
const (
	poolMain        = "main"        // stock, locks, outcomes, poison, acks
	poolSubscribers = "subscribers" // the consumers' reads
)

// instrumentPools reports the connection pools of the worker's Redis clients (redisotel's
// db.client.connections.* metrics, by pool.name) until stopPoolMetrics.
func (w *Worker) instrumentPools() error {
	w.pools = make(chan struct{})
	clients := map[string]redis.UniversalClient{poolMain: w.rdb, poolSubscribers: w.subRDB}
	for _, c := range w.lockRDB {
		clients["redlock "+c.Options().Addr] = c
	}
	var errs []error
	for name, c := range clients {
		errs = append(errs, redisotel.InstrumentMetrics(c, redisotel.WithPoolName(name),
			redisotel.WithSemConvCompliantMetrics(true), redisotel.WithCloseChan(w.pools)))
	}
	return errors.Join(errs...)
}

// stopPoolMetrics stops what instrumentPools started.
func (w *Worker) stopPoolMetrics() {
	if w.pools != nil {
		close(w.pools)
		w.pools = nil
	}
}
