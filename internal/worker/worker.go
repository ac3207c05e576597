// Package worker wires the order worker: Redis clients, the locker, the stock store, one redisstream
// subscriber per consumer in a Watermill router, and the per-message middleware chain.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/telemetry"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
)

// errShutdownTimeout ends the orders still in flight when SHUTDOWN_TIMEOUT has passed.
var errShutdownTimeout = errors.New("worker: shutdown timeout")

// Worker is one worker process.
type Worker struct {
	cfg     Config
	logger  *slog.Logger
	rdb     *redis.Client   // stock, locks, outcomes, poison, acks
	subRDB  *redis.Client   // the subscribers' reads
	lockRDB []*redis.Client // Redlock masters
	locker  interface {
		lockmw.Locker
		Close() error
	}
	router    *message.Router
	results   message.Publisher
	reserver  *handlers.Reserver
	lock      *lockmw.Middleware
	drain     context.Context
	stopDrain context.CancelCauseFunc
	metrics   http.Handler
	attempts  attempts
	busy      busyClock
	streams   []stream // one per consumer
	backlog   atomic.Pointer[backlog]
	holder    atomic.Pointer[string] // the other group that holds trimming back, as last warned about
	// readsFailing is since when the consumers' reads have been failing (unix ns), 0 while they succeed.
	readsFailing atomic.Int64
	gauges       metric.Registration
}

// keepOpen hides Close from Watermill, which closes the client it is given; the worker closes its clients.
type keepOpen struct{ redis.UniversalClient }

func (keepOpen) Close() error { return nil }

// Options are what the worker takes from its embedder rather than from settings.
type Options struct {
	Metrics http.Handler // served on /metrics; nil: not served
	Tracing bool         // spans are exported: the Redis client may be instrumented
	// Locker replaces the locker the settings describe (benchmarks plug in other lock libraries).
	Locker lockmw.Locker
	// NoLock runs the handler without the lock middleware, unfenced: only the stock script's atomicity
	// protects the stock. For measuring what the lock costs; never in production.
	NoLock bool
}

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
	wmLogger := watermill.NewSlogLogger(w.logger)
	if err := w.setHandler(wmLogger); err != nil {
		return err
	}
	var err error
	w.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: w.cfg.ShutdownTimeout + 2*time.Second}, wmLogger)
	if err != nil {
		return err
	}
	return w.addConsumers(wmLogger)
}

// connect creates the clients: one for the handlers, one for the subscribers' reads.
func (w *Worker) connect(tracing bool) error {
	redisOpts, _ := config.RedisOptions(w.cfg.RedisURL)
	w.rdb = redis.NewClient(redisOpts)
	subOpts := *redisOpts
	subOpts.PoolSize = 2*w.cfg.Concurrency + 4 // a read and a claim per consumer
	w.subRDB = redis.NewClient(&subOpts)
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
	// Fencing counters expire with the outcome records: a SKU named once (a typo) leaves nothing behind.
	lockCfg := lockmw.Config{Lease: w.cfg.LockLease, MaxWait: w.cfg.LockWait, Logger: w.logger, TokenTTL: w.cfg.OutcomeTTL}
	var err error
	switch urls, _ := config.RedisURLs(w.cfg.RedlockURLs); {
	case opts.Locker != nil || opts.NoLock:
	case len(urls) > 0:
		var clients []redis.UniversalClient
		for _, o := range urls {
			c := redis.NewClient(o)
			w.lockRDB = append(w.lockRDB, c)
			clients = append(clients, c)
		}
		w.locker, err = lockmw.NewRedlock(clients, lockCfg)
	default:
		w.locker, err = lockmw.NewReentrant(w.rdb, lockCfg)
	}
	if err != nil {
		return err
	}
	var locker lockmw.Locker = w.locker
	if opts.Locker != nil {
		locker = opts.Locker
	}
	w.attempts = attempts{max: w.cfg.MaxAttempts, claimIdle: w.cfg.ClaimIdle, logger: w.logger}
	if opts.NoLock {
		return nil
	}
	w.lock = &lockmw.Middleware{Locker: locker, Key: handlers.SKU, Instance: w.cfg.Name}
	if r, ok := locker.(interface {
		RaiseToken(context.Context, string, int64) error
	}); ok {
		w.attempts.raiseToken = r.RaiseToken
	}
	return nil
}

// setHandler builds the order handler, its results publisher and the backlog gauges.
func (w *Worker) setHandler(wmLogger watermill.LoggerAdapter) error {
	var err error
	w.results, err = redisstream.NewPublisher(redisstream.PublisherConfig{Client: keepOpen{w.rdb},
		DefaultMaxlen: int64(w.cfg.ResultsMaxLen)}, wmLogger)
	if err != nil {
		return err
	}
	w.reserver = &handlers.Reserver{Store: inventory.New(w.rdb, inventory.WithOutcomeTTL(w.cfg.OutcomeTTL)),
		Results: telemetry.Publisher{Publisher: w.results}, ResultsTopic: w.cfg.ResultsStream, Worker: w.cfg.Name,
		DelayWrite: w.cfg.FaultDelayWrite}
	w.gauges, err = meter.RegisterCallback(w.observeBacklog, pendingGauge, lagGauge, oldestPendingAge)
	return err
}

// addConsumers adds one redisstream subscriber and handler per consumer to the router.
func (w *Worker) addConsumers(wmLogger watermill.LoggerAdapter) error {
	cfg := w.cfg
	w.busy = make(busyClock, cfg.Concurrency)
	for i := range cfg.Concurrency {
		consumer := fmt.Sprintf("%s-%d", cfg.Name, i)
		s := stream{rdb: w.rdb, name: cfg.OrdersStream, group: cfg.ConsumerGroup, consumer: consumer,
			poison: cfg.PoisonStream, poisonMaxLen: cfg.PoisonMaxLen, busy: &w.busy[i]}
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client: &subscriberClient{UniversalClient: w.subRDB, s: s, logger: w.logger, failing: &w.readsFailing,
				replayFrom: cfg.replayFrom},
			Unmarshaller:  entryUnmarshaller{},
			ConsumerGroup: cfg.ConsumerGroup,
			Consumer:      consumer,
			OldestId:      "$", // Run created the group already (prepare), at CONSUMER_GROUP_START
			MaxIdleTime:   cfg.ClaimIdle,
			// Failed attempts are handed back to be claimed after about a second (attempts).
			ClaimInterval:                 min(cfg.ClaimIdle/4, time.Second),
			NackResendSleep:               500 * time.Millisecond,
			DisableIndefiniteInitialBlock: true, // so the read loops notice a shutdown
		}, wmLogger)
		if err != nil {
			return err
		}
		w.streams = append(w.streams, s)
		chain := w.chain(s)
		w.router.AddConsumerHandler(consumer, cfg.OrdersStream, sub, func(msg *message.Message) error {
			_, err := chain(msg)
			return err
		})
	}
	return nil
}

// chain builds the per-message middleware chain of one consumer, outermost first.
func (w *Worker) chain(s stream) message.HandlerFunc {
	h := func(msg *message.Message) ([]*message.Message, error) { return nil, w.reserver.Handle(msg) }
	a := w.attempts
	a.s = s
	mws := []message.HandlerMiddleware{
		s.traceMiddleware,
		s.poisonMiddleware(w.logger),
		recoverMiddleware(w.logger),
		drainMiddleware(w.drain),
		a.middleware,
		s.keepaliveMiddleware(w.cfg.ClaimIdle),
		handlers.Decode,
		s.ackMiddleware,
	}
	if w.lock != nil {
		mws = append(mws, w.lock.Middleware)
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Run processes orders until ctx is done, then shuts down: it stops taking messages, lets the orders in
// flight finish within the shutdown timeout (their locks are released as they finish) and closes
// everything. It returns an error if the router stops on its own.
func (w *Worker) Run(ctx context.Context) error {
	defer w.Close()
	// Probes are answered from the start: /healthz while the worker waits for Redis, /readyz says why not.
	if w.cfg.MetricsAddr != "" {
		srv := &http.Server{Addr: w.cfg.MetricsAddr, Handler: w.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				w.logger.Error("metrics server", "err", err)
			}
		}()
		defer srv.Close()
	}
	if err := w.prepare(ctx); err != nil {
		return err
	}
	hkCtx, stopHousekeeping := context.WithCancel(context.Background())
	defer stopHousekeeping()
	go w.housekeep(hkCtx)
	stopped := make(chan struct{})
	go func() {
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
	}()
	// The router runs under its own context: cancelling it would skip closing the subscribers.
	err := w.router.Run(context.Background())
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

// handBackUnfinished gives the entries this worker's consumers still have pending (read ahead and never
// started, or cut off by the shutdown timeout) back to the group at once and without counting the
// delivery, so the other workers claim them at their next claim round rather than after CLAIM_IDLE, and a
// rolling restart does not bring an order closer to MAX_ATTEMPTS.
func (w *Worker) handBackUnfinished(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	n := 0
	for _, s := range w.streams {
		pending, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.name, Group: s.group, Start: "-",
			End: "+", Count: 100, Consumer: s.consumer}).Result()
		for _, p := range pending {
			if err = s.reclaim(ctx, p.ID, w.cfg.ClaimIdle, true); err == nil {
				n++
			}
		}
		if err != nil {
			w.logger.Warn("could not hand back unfinished entries", "consumer", s.consumer, "err", err)
		}
	}
	if n > 0 {
		w.logger.Info("handed back entries read but not finished", "entries", n)
	}
}

func (w *Worker) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if w.metrics != nil {
		mux.Handle("/metrics", w.metrics)
	}
	// Profiles for operators, on the same internal port: /debug/pprof/profile?seconds=10 and friends.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.ready(r.Context()); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	return mux
}

// Close releases everything New opened. Run calls it.
func (w *Worker) Close() {
	w.stopDrain(errors.New("worker: closed"))
	if w.gauges != nil {
		_ = w.gauges.Unregister()
	}
	if w.locker != nil {
		_ = w.locker.Close()
	}
	w.closeClients()
}

func (w *Worker) closeClients() {
	for _, c := range append([]*redis.Client{w.rdb, w.subRDB}, w.lockRDB...) {
		if c != nil {
			_ = c.Close()
		}
	}
}
