// Package worker wires the order worker: settings ▶ Redis clients ▶ the locker and the lock middleware ▶ the
// stock store, the decode and batching steps and the order handler (package handlers) ▶ one
// redisstream.Subscriber per consumer in a Watermill router, each with the entry's delivery steps (package
// delivery) ▶ run.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/delivery"
	"github.com/stockflow/stockflow/internal/hot"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// errShutdownTimeout ends the orders still in flight when SHUTDOWN_TIMEOUT has passed.
var errShutdownTimeout = errors.New("worker: shutdown timeout")

// Worker is one worker process.
type Worker struct {
	cfg     Config
	logger  *slog.Logger
	rdb     redis.UniversalClient   // stock, locks, outcomes, poison, acks
	subRDB  redis.UniversalClient   // the subscribers' reads
	lockRDB []*redis.Client         // Redlock masters
	parts   []order.Partition       // the streams of the orders' partitions
	sub     *redisstream.Subscriber // the worker's consumer's; its owners say whether it housekeeps
	locker  interface {
		rlock.Locker
		Close() error
	}
	router *message.Router
	// wmLogger is the Router's and the subscriber's logger.
	wmLogger  quietLogger
	store     *inventory.Store
	handler   *handlers.Handler
	decoder   *delivery.Decoder    // the orders' decode step, the last of the delivery steps
	batcher   *lockmw.Batcher      // the batching step ahead of the lock middleware
	lockMW    *lockmw.Middleware   // nil: NoLock
	hot       *hot.Recorder        // the lock waits by SKU, for stockctl hot; nil: NoLock
	tokens    delivery.TokenRaiser // the locker's fencing counters; nil when it has none
	drain     context.Context
	stopDrain context.CancelCauseFunc
	metrics   http.Handler
	consumer  *delivery.Consumer
	backlog   atomic.Pointer[backlog]
	// holders are the other groups that hold trimming back, by stream, as last warned about (housekeeping's
	// goroutine only).
	holders map[string]string
	gauges  metric.Registration
	pools   chan struct{} // closed to stop the connection pool metrics (instrumentPools)
}

// Options are what the worker takes from its embedder rather than from settings.
type Options struct {
	Metrics http.Handler // served on /metrics; nil: not served
	Tracing bool         // spans are exported: the Redis client may be instrumented
	// Locker replaces the locker the settings describe: another lock library (the bench), or NoLock.
	Locker rlock.Locker
	// Faults are the fault tests' hooks (testkit/faultworker); nil in production.
	Faults *Faults
}

// Faults are hooks for the fault tests' worker binary, which records every operation for the history
// checker and delays writes past a lost lease. The production worker never sets them.
type Faults struct {
	// Store wraps the stock store the handler writes through.
	Store func(handlers.Store) handlers.Store
	// Handler wraps the handler, inside the lock.
	Handler message.HandlerMiddleware
	// NoElision turns lock elision off: a delayed write must hold a lock of its own.
	NoElision bool
}

// NoLock as Options.Locker runs the handler without the lock middleware, unfenced: only the stock
// script's atomicity protects the stock. For measuring what the lock costs; never in production.
var NoLock rlock.Locker = noLock{}

type noLock struct{}

func (noLock) Acquire(context.Context, string) (rlock.Lease, error) { return nil, errNoLock }

func (noLock) TryAcquire(context.Context, string) (rlock.Lease, error) { return nil, errNoLock }

var errNoLock = errors.New("worker: NoLock takes no locks")

// New builds a worker; it connects lazily. Close it if Run is not called.
func New(cfg Config, logger *slog.Logger, opts Options) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, logger: logger, metrics: opts.Metrics}
	w.drain, w.stopDrain = context.WithCancelCause(context.Background())
	if err := w.build(opts); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *Worker) build(opts Options) error {
	if err := w.connect(opts.Tracing); err != nil {
		return err
	}
	if err := w.setLocker(opts); err != nil {
		return err
	}
	if err := w.instrumentPools(); err != nil {
		return err
	}
	w.wmLogger = quietLogger{watermill.NewSlogLogger(w.logger), w.logger}
	if err := w.setHandler(opts.Faults); err != nil {
		return err
	}
	var err error
	w.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: w.cfg.ShutdownTimeout + 2*time.Second}, w.wmLogger)
	if err != nil {
		return err
	}
	return w.addConsumer(opts.Faults)
}

// connect creates the clients: one for the handlers, one for the subscribers' reads.
func (w *Worker) connect(tracing bool) (err error) {
	w.parts = w.cfg.Partitions()
	if w.rdb, err = w.cfg.Client(0); err != nil {
		return err
	}
	// The subscriber's reads, claims and prunes (per node, on a cluster); its keyspace event subscriptions
	// have connections of their own.
	if w.subRDB, err = w.cfg.Client(4); err != nil {
		return err
	}
	if !tracing || !w.cfg.TraceRedis {
		return nil
	}
	// Statements off: no payloads or arguments in spans; caller off: it walks the stack on every command (a
	// tenth of the CPU under load). The subscribers' client is not instrumented, so their polling stays out
	// of the traces.
	return redisotel.InstrumentTracing(w.rdb, redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
}

// setLocker picks the locker (the embedder's, Redlock or Reentrant) and the lock middleware.
func (w *Worker) setLocker(opts Options) error {
	locker := opts.Locker
	if locker == nil {
		if err := w.newLocker(); err != nil {
			return err
		}
		locker = w.locker
	}
	if locker == NoLock {
		return nil
	}
	w.hot = hot.NewRecorder(w.rdb, w.logger)
	w.lockMW = &lockmw.Middleware{Locker: locker, Wait: w.cfg.LockWait, Instance: w.cfg.Name, Waits: w.hot}
	if r, ok := locker.(delivery.TokenRaiser); ok {
		w.tokens = r
	}
	return nil
}

// Both lockers raise their fencing counters, which delivery's retry relies on to recover a lost counter: a
// change of the method's signature must fail here, not turn the recovery off.
var (
	_ delivery.TokenRaiser = (*rlock.Reentrant)(nil)
	_ delivery.TokenRaiser = (*rlock.Redlock)(nil)
)

// newLocker builds the locker the settings describe: Redlock over REDLOCK_URLS, or Reentrant on REDIS_URL.
func (w *Worker) newLocker() (err error) {
	// Fencing counters expire with the outcome records: a SKU named once (a typo) leaves nothing behind.
	cfg := rlock.Config{Lease: w.cfg.LockLease, MaxWait: w.cfg.LockWait, Logger: w.logger, TokenTTL: w.cfg.OutcomeTTL}
	urls, _ := w.cfg.RedlockOptions()
	if len(urls) == 0 {
		w.locker, err = rlock.NewReentrant(w.rdb, cfg)
		return err
	}
	var clients []redis.UniversalClient
	for _, o := range urls {
		c := redis.NewClient(o)
		w.lockRDB = append(w.lockRDB, c)
		clients = append(clients, c)
	}
	w.locker, err = rlock.NewRedlock(clients, cfg)
	return err
}

// setHandler builds the decode step, the batching step and the order handler, and the lock middleware's ways
// to the section: batched, elided when the lock lives on the stock's Redis (and LOCK_ELISION is on), and
// fenced at the store when it does not
// (Redlock: each acquisition first raises the SKU's stored fence to its token, so the store refuses every
// older token before this holder writes too; one round trip to the stock's Redis per acquisition).
func (w *Worker) setHandler(faults *Faults) error {
	w.store = inventory.New(w.rdb, w.storeOptions()...)
	var store handlers.Store = w.store
	if faults != nil && faults.Store != nil {
		store = faults.Store(store)
	}
	elide := w.lockMW != nil && w.cfg.LockElision && w.fenceCounterAtStore() && (faults == nil || !faults.NoElision)
	w.decoder = &delivery.Decoder{Lines: store, Redis: w.rdb, Partitions: w.parts, Group: w.cfg.ConsumerGroup,
		ClaimIdle: w.cfg.ClaimIdle, Elide: elide, Cluster: w.cfg.Cluster}
	w.batcher = &lockmw.Batcher{MaxWait: w.cfg.LockWait}
	// The outcome events: each the answer to its order's entry, written only while the entry is this
	// consumer's, to its partition of RESULTS_STREAM; with REPLICA_ACKS on the replicas before the entry
	// is acked (a failover must not keep the ack and lose the outcome).
	outcomes, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: w.rdb, ConsumerGroup: w.cfg.ConsumerGroup,
		Consumer: w.cfg.Name, DefaultMaxlen: int64(w.cfg.ResultsMaxLen),
		ReplicaAcks: w.cfg.Replicas.Acks, ReplicaAckTimeout: w.cfg.Replicas.Timeout}, w.wmLogger)
	if err != nil {
		return err
	}
	w.handler = handlers.New(handlers.Config{Store: store, Worker: w.cfg.Name, Logger: w.logger, Batcher: w.batcher,
		Outcomes: outcomes, ResultsTopic: w.cfg.ResultsStream})
	if w.lockMW != nil && !w.fenceCounterAtStore() {
		w.lockMW.Fencer = w.store
	}
	w.gauges, err = meter.RegisterCallback(w.observeBacklog, pendingGauge, lagGauge, oldestPendingAge)
	return err
}

// storeOptions: outcome records live OUTCOME_TTL; with the reentrant lock on the stock's own Redis, a write
// is also checked against the lock's fencing counter, so a stale holder is refused as soon as a newer one
// has the lock, not only once it wrote. (Redlock's counters live on its masters: there each acquisition
// raises the stored fence, raiseFence.)
func (w *Worker) storeOptions() []inventory.Option {
	opts := []inventory.Option{inventory.WithOutcomeTTL(w.cfg.OutcomeTTL),
		inventory.WithReplicaAcks(w.cfg.Replicas.Acks, w.cfg.Replicas.Timeout)}
	if w.fenceCounterAtStore() {
		// The counter, and for lock elision (setHandler) the lock and the counter's TTL as the locker's
		// acquisitions give it (newLocker).
		opts = append(opts, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, w.cfg.OutcomeTTL))
	}
	return opts
}

// addConsumer adds the worker's consumer to the router: a subscriber (redisstream.Subscriber) that reads the
// orders in batches and has up to WORKER_CONCURRENCY of them handled at once, and its chain of steps.
func (w *Worker) addConsumer(faults *Faults) error {
	steps := []message.HandlerMiddleware{w.decoder.Decode, w.batcher.Middleware}
	if w.lockMW != nil {
		steps = append(steps, w.lockMW.Middleware)
	}
	if faults != nil && faults.Handler != nil {
		steps = append(steps, faults.Handler)
	}
	cfg := w.cfg
	w.consumer = delivery.New(delivery.Config{Redis: w.rdb, Partitions: w.parts, Group: cfg.ConsumerGroup, Name: cfg.Name,
		PoisonMaxLen: cfg.PoisonMaxLen, MaxAttempts: cfg.MaxAttempts, ClaimIdle: cfg.ClaimIdle, Logger: w.logger,
		Tokens: w.tokens})
	// The public Pub/Sub, with the worker's own settings: the partitions' layout and poison streams, and the
	// three options that leave Watermill's contract for throughput (docs/architecture.md): a failed attempt
	// is handed back to the group (delivery's retry), not sent again.
	partitions := 0 // one partition on one Redis: the streams as named
	if w.parts[0].Orders != cfg.OrdersStream {
		partitions = len(w.parts)
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: w.subRDB, ConsumerGroup: cfg.ConsumerGroup,
		Consumer: cfg.Name, Partitions: partitions, MaxInFlight: cfg.Concurrency, MaxEntryBytes: order.MaxEntryBytes,
		PoisonTopic: cfg.PoisonStream, PoisonMaxLen: cfg.PoisonMaxLen, KeyspaceEvents: keyspaceEvents[cfg.KeyspaceEvents],
		MaxIdleTime: cfg.ClaimIdle,
		// Failed attempts are handed back to be claimed after about a second (attempts).
		ClaimInterval: min(cfg.ClaimIdle/4, time.Second), RecreateFrom: cfg.replayFrom,
		// The orders in flight finish on shutdown, until SHUTDOWN_TIMEOUT.
		HandlingContext: w.drain, ReleasedByHandler: true}, w.wmLogger)
	if err != nil {
		return err
	}
	w.sub = sub
	// The router acks a message whose handler returned nil (the subscriber then acks its entry in Redis, many
	// in one XACK), and nacks it otherwise: a failed attempt was handed back (delivery.ErrHandedBack), an
	// entry claimed meanwhile is the claimer's (handlers.ErrClaimed). The steps are the handler's middlewares,
	// outermost first: the subscriber's release (ReleasedByHandler), the delivery steps, then steps.
	h := w.router.AddConsumerHandler(cfg.Name, cfg.OrdersStream, sub, w.handler.Handle)
	h.AddMiddleware(sub.ReleaseMiddleware)
	h.AddMiddleware(w.consumer.Steps()...)
	h.AddMiddleware(steps...)
	return nil
}

// quietLogger is Watermill's slog adapter, which builds the attributes of a Debug or Trace line only when
// its level is on: the Router logs every message at Trace.
type quietLogger struct {
	watermill.LoggerAdapter
	logger *slog.Logger
}

// Slog is where the subscriber logs, with slog's levels (redisstream.NewSubscriber).
func (q quietLogger) Slog() *slog.Logger { return q.logger }

func (q quietLogger) Debug(msg string, fields watermill.LogFields) {
	if q.logger.Enabled(context.Background(), slog.LevelDebug) {
		q.LoggerAdapter.Debug(msg, fields)
	}
}

// Error leaves out the router's line for a message whose entry was left pending on purpose (handed back for
// a retry, or claimed by another consumer): the delivery steps log those already.
func (q quietLogger) Error(msg string, err error, fields watermill.LogFields) {
	if !errors.Is(err, redisstream.ErrLeftPending) {
		q.LoggerAdapter.Error(msg, err, fields)
	}
}

func (q quietLogger) Trace(msg string, fields watermill.LogFields) {
	if q.logger.Enabled(context.Background(), watermill.LevelTrace) {
		q.LoggerAdapter.Trace(msg, fields)
	}
}

func (q quietLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietLogger{q.LoggerAdapter.With(fields), q.logger}
}

// fenceCounterAtStore: the lock's fencing counters live on the stock's Redis, where the stock script
// compares with them (storeOptions).
func (w *Worker) fenceCounterAtStore() bool {
	_, reentrant := w.locker.(*rlock.Reentrant)
	return reentrant
}

// Run processes orders until ctx is done, then shuts down: it stops taking messages, lets the orders in
// flight finish within the shutdown timeout (their locks are released as they finish) and closes
// everything. It returns an error if the router stops on its own.
func (w *Worker) Run(ctx context.Context) error {
	defer w.Close()
	// Probes are answered from the start: /healthz while the worker waits for Redis, /readyz says why not.
	stopHTTP, err := w.serveHTTP()
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := w.prepare(ctx); err != nil {
		return err
	}
	hkCtx, stopHousekeeping := context.WithCancel(context.Background())
	defer stopHousekeeping()
	go w.housekeep(hkCtx)
	go w.hot.Run(hkCtx) // publishes the hot SKUs every second; nothing with NoLock (nil)
	stopped := make(chan struct{})
	go w.shutDownWhenDone(ctx, stopped)
	// The router runs under its own context: cancelling it would skip closing the subscribers.
	err = w.router.Run(context.Background())
	close(stopped)
	if err != nil {
		return err
	}
	if ctx.Err() == nil {
		return errors.New("worker: the router stopped by itself (every consumer failed)")
	}
	w.handBackUnfinished(ctx)
	w.logger.Info("shut down")
	return nil
}

// shutDownWhenDone closes the router once ctx is done (unless it stopped before), giving the orders in
// flight SHUTDOWN_TIMEOUT to finish.
func (w *Worker) shutDownWhenDone(ctx context.Context, stopped <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-stopped:
		return
	}
	w.logger.Info("shutting down: finishing orders in flight", "timeout", w.cfg.ShutdownTimeout)
	timer := time.AfterFunc(w.cfg.ShutdownTimeout, func() { w.stopDrain(errShutdownTimeout) })
	defer timer.Stop()
	if err := w.router.Close(); err != nil {
		w.logger.Error("router close", "err", err)
	}
}

// handBackUnfinished gives the entries this worker's consumers still have pending (read ahead and never
// started, or cut off by the shutdown timeout) back to the group at once and without counting the
// delivery, so the other workers claim them at their next claim round rather than after CLAIM_IDLE, and a
// rolling restart does not bring an order closer to MAX_ATTEMPTS.
func (w *Worker) handBackUnfinished(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// First the acks of the orders the router acked: handed back, they would be decided again.
	if err := w.sub.FlushAcks(ctx); err != nil {
		w.logger.Warn("could not send every ack before handing back the unfinished entries", "err", err)
	}
	n, err := w.consumer.HandBackPending(ctx)
	if err != nil {
		w.logger.Warn("could not hand back unfinished entries", "consumer", w.consumer.Name(), "err", err)
	}
	if n > 0 {
		w.logger.Info("handed back entries read but not finished", "entries", n)
	}
}

// Close releases everything New opened. Run calls it.
func (w *Worker) Close() {
	w.stopDrain(errors.New("worker: closed"))
	if w.gauges != nil {
		_ = w.gauges.Unregister()
	}
	w.stopPoolMetrics()
	if w.locker != nil {
		_ = w.locker.Close()
	}
	w.closeClients()
}

func (w *Worker) closeClients() {
	for _, c := range []redis.UniversalClient{w.rdb, w.subRDB} {
		if c != nil {
			_ = c.Close()
		}
	}
	for _, c := range w.lockRDB {
		_ = c.Close()
	}
}
