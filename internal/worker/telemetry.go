package worker

import (
	"errors"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

var (
	meter           = otel.Meter("github.com/stockflow/stockflow/internal/worker")
	pendingGauge, _ = meter.Int64ObservableGauge("stockflow.messages.pending",
		metric.WithDescription("Entries delivered to the consumer group and not acked yet."))
	lagGauge, _ = meter.Int64ObservableGauge("stockflow.consumer.lag",
		metric.WithDescription("Entries of the orders stream not yet delivered to the consumer group."))
	oldestPendingAge, _ = meter.Float64ObservableGauge("stockflow.messages.oldest_pending_age",
		metric.WithUnit("s"),
		metric.WithDescription("Age (since it was published) of the oldest entry still pending in the group; 0 when none is."))
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
