// Package worker wires the order worker: Redis clients, the locker, the stock store, one redisstream
// subscriber per consumer in a Watermill router, and the per-message middleware chain.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/history"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

// errShutdownTimeout ends the orders still in flight when SHUTDOWN_TIMEOUT has passed.
var errShutdownTimeout = errors.New("worker: shutdown timeout")

// Worker is one worker process.
type Worker struct {
	cfg     Config
	logger  *slog.Logger
	rdb     redis.UniversalClient // stock, locks, outcomes, poison, acks
	subRDB  redis.UniversalClient // the subscribers' reads
	lockRDB []*redis.Client       // Redlock masters
	parts   []stream.Partition    // the streams of the orders' partitions
	locker  interface {
		rlock.Locker
		Close() error
	}
	router   *message.Router
	store    *inventory.Store
	reserver *handlers.Reserver
	combiner *combiner
	server   []attribute.KeyValue      // the stock Redis's address, for the spans of the outcome events
	history  *history.Recorder         // FAULT_HISTORY_DIR; nil: not recording
	lock     message.HandlerMiddleware // nil: NoLock
	// raiseToken raises the fencing counter of a lock key; nil when the locker has none.
	raiseToken func(ctx context.Context, key string, token int64) error
	drain      context.Context
	stopDrain  context.CancelCauseFunc
	metrics    http.Handler
	busy       busyClock
	consumers  []*consumer
	backlog    atomic.Pointer[backlog]
	holder     atomic.Pointer[string] // the other group that holds trimming back, as last warned about
	// readsFailing is since when the consumers' reads have been failing (unix ns), 0 while they succeed.
	readsFailing atomic.Int64
	gauges       metric.Registration
	pools        chan struct{} // closed to stop the connection pool metrics (instrumentPools)
}

// Options are what the worker takes from its embedder rather than from settings.
type Options struct {
	Metrics http.Handler // served on /metrics; nil: not served
	Tracing bool         // spans are exported: the Redis client may be instrumented
	// Locker replaces the locker the settings describe: another lock library (the bench), or NoLock.
	Locker rlock.Locker
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
	if err := w.openHistory(); err != nil {
		return err
	}
	if err := w.connect(opts.Tracing); err != nil {
		return err
	}
	if err := w.setLocker(opts); err != nil {
		return err
	}
	if err := w.instrumentPools(); err != nil {
		return err
	}
	wmLogger := watermill.NewSlogLogger(w.logger)
	if err := w.setHandler(); err != nil {
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
func (w *Worker) connect(tracing bool) (err error) {
	w.parts = w.cfg.Partitions()
	if w.rdb, err = w.cfg.Client(0); err != nil {
		return err
	}
	// A read and a claim per consumer (per node, on a cluster).
	if w.subRDB, err = w.cfg.Client(2*w.cfg.Concurrency + 4); err != nil {
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
	w.lock = (&lockmw.Middleware{Locker: locker, Keys: handlers.SKUs, Wait: w.cfg.LockWait, Instance: w.cfg.Name}).Middleware
	if r, ok := locker.(interface {
		RaiseToken(context.Context, string, int64) error
	}); ok {
		w.raiseToken = r.RaiseToken
	}
	return nil
}

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

// setHandler builds the order handler, the combiner that feeds it batches, and the backlog gauges.
func (w *Worker) setHandler() error {
	w.store = inventory.New(w.rdb, w.storeOptions()...)
	var store handlers.Store = w.store
	if w.history != nil {
		store = recordingStore{w.store, w.history}
	}
	w.reserver = &handlers.Reserver{Store: store, Worker: w.cfg.Name}
	w.server = stream.ServerAttributes(w.rdb)
	w.combiner = newCombiner(w.cfg.LockWait, w.decide)
	// Lock elision needs the reentrant lock on the stock's Redis. Not with FAULT_DELAY_WRITE, which delays
	// the write of a lock holder: an elided write holds the lock only while it runs.
	w.combiner.elide = w.cfg.LockElision && w.fenceCounterAtStore() && w.cfg.FaultDelayWrite == 0
	var err error
	w.gauges, err = meter.RegisterCallback(w.observeBacklog, pendingGauge, lagGauge, oldestPendingAge)
	return err
}

// decide decides a batch of one SKU's orders under the lock's token, then publishes their outcome events
// to their partitions' results streams and acks their entries in one round trip, a MULTI/EXEC: a Redis
// that refuses the XADDs (OOM, say) must not run the XACK, or the entries would be acked without an outcome
// (a command refused while queued aborts the transaction). When no more orders of the SKU wait (more), that
// round trip also releases the SKU's lock (the reentrant lock, on this Redis), and released says so: the
// leader then steps down. On a cluster a transaction cannot span slots: each partition's outcomes and acks
// go in a MULTI of their own, and the lock middleware releases the lock.
func (w *Worker) decide(ctx context.Context, batch []*pending, token int64, more func() bool) (released bool, err error) {
	msgs, err := w.reserver.Decide(ctx, requests(batch), token)
	if err != nil {
		return false, err
	}
	return w.publish(ctx, batch, msgs, more)
}

// publish sends the outcome events msgs of batch's orders and acks their entries, as decide describes.
func (w *Worker) publish(ctx context.Context, batch []*pending, msgs []*message.Message, more func() bool) (released bool, err error) {
	pipes, sent, err := w.queueAll(ctx, batch, msgs)
	if err != nil {
		return false, err
	}
	var finish func(error) error
	if !w.cfg.Cluster {
		finish = w.releaseIn(ctx, pipes[0], more)
	}
	var execErr error
	for _, pipe := range pipes {
		_, err := pipe.Exec(ctx)
		execErr = cmp.Or(execErr, err)
	}
	if finish != nil {
		// The release's own failure (NOSCRIPT the first time, say) is finish's to mend.
		if rerr := finish(execErr); rerr != nil && !errors.Is(rerr, rlock.ErrNotHeld) {
			w.logger.Warn("unlock failed; the lock expires with its lease", "sku", batch[0].order.SKU, "err", rerr)
		}
	}
	if err := endAll(sent); err != nil {
		return finish != nil, fmt.Errorf("publish and ack the outcomes of %d orders: %w", len(batch), err)
	}
	return finish != nil, nil
}

// queueAll queues the outcome events and acks of batch by partition: on one MULTI, or on a cluster one per
// partition.
func (w *Worker) queueAll(ctx context.Context, batch []*pending, msgs []*message.Message) ([]redis.Pipeliner, []*outcomes, error) {
	pipes := []redis.Pipeliner{w.rdb.TxPipeline()}
	var sent []*outcomes
	for i, part := range w.byPartition(batch) {
		if i > 0 && w.cfg.Cluster {
			pipes = append(pipes, w.rdb.TxPipeline())
		}
		o, err := w.queueOutcomes(ctx, pipes[len(pipes)-1], part, msgs)
		if o != nil {
			sent = append(sent, o)
		}
		if err != nil {
			endAll(sent)
			return nil, nil, err
		}
	}
	return pipes, sent, nil
}

// outcomes are the outcome events and the ack of one partition's orders, queued on a pipeline.
type outcomes struct {
	results stream.Batch
	ack     *redis.IntCmd
}

// queueOutcomes queues the outcome events (msgs, by the batch's order) of part's orders and their XACK on
// pipe.
func (w *Worker) queueOutcomes(ctx context.Context, pipe redis.Pipeliner, part partitionBatch, msgs []*message.Message) (*outcomes, error) {
	o := &outcomes{results: stream.Batch{Topic: part.Results, MaxLen: int64(w.cfg.ResultsMaxLen), Server: w.server}}
	ids := make([]string, len(part.orders))
	for i, k := range part.orders {
		if err := o.results.Add(pipe, msgs[k.index]); err != nil {
			return o, err
		}
		ids[i] = k.msg.UUID
	}
	o.ack = pipe.XAck(ctx, part.Orders, w.cfg.ConsumerGroup, ids...)
	return o, nil
}

// endAll ends the outcome events' spans and returns the first error of their XADDs and XACKs.
func endAll(sent []*outcomes) error {
	var first error
	for _, o := range sent {
		first = cmp.Or(first, o.results.End())
		if o.ack != nil {
			first = cmp.Or(first, o.ack.Err())
		}
	}
	return first
}

// partitionBatch is the orders of a batch read from one partition (normally all of them: a SKU's orders
// go to one partition, unless a producer routed one elsewhere).
type partitionBatch struct {
	stream.Partition
	orders []indexed
}

type indexed struct {
	*pending
	index int // in the batch
}

// byPartition splits batch by the partition each order was read from, in the order they first appear.
func (w *Worker) byPartition(batch []*pending) []partitionBatch {
	var parts []partitionBatch
	for i, p := range batch {
		part := w.parts[stream.EntryPartition(p.msg)]
		j := slices.IndexFunc(parts, func(b partitionBatch) bool { return b.Index == part.Index })
		if j < 0 {
			parts, j = append(parts, partitionBatch{Partition: part}), len(parts)
		}
		parts[j].orders = append(parts[j].orders, indexed{p, i})
	}
	return parts
}

// releaseIn queues the release of the message's lock on pipe when its stock writes are done and no more
// orders of its SKU wait: the stock is decided, so the outcome events and acks need no lock. Only the
// reentrant lock lives on this Redis; nil when nothing was queued.
func (w *Worker) releaseIn(ctx context.Context, pipe redis.Pipeliner, more func() bool) func(error) error {
	lease, ok := lockmw.LeaseFrom(ctx)
	if !ok || !w.fenceCounterAtStore() || more() {
		return nil
	}
	return rlock.ReleaseIn(context.WithoutCancel(ctx), pipe, lease)
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

// addConsumers adds one subscriber (stream.Subscriber) and handler per consumer to the router.
func (w *Worker) addConsumers(_ watermill.LoggerAdapter) error {
	cfg := w.cfg
	w.busy = make(busyClock, cfg.Concurrency)
	subs := stream.SubscriberConfig{Partitions: w.parts, Group: cfg.ConsumerGroup, PoisonMaxLen: cfg.PoisonMaxLen,
		ClaimIdle: cfg.ClaimIdle,
		// Failed attempts are handed back to be claimed after about a second (attempts).
		ClaimInterval: min(cfg.ClaimIdle/4, time.Second),
		Logger:        w.logger, Failing: &w.readsFailing, ReplayFrom: cfg.replayFrom}
	for i := range cfg.Concurrency {
		name := fmt.Sprintf("%s-%d", cfg.Name, i)
		c := &consumer{rdb: w.rdb, server: w.server, parts: w.parts, group: cfg.ConsumerGroup, name: name,
			poisonMaxLen: cfg.PoisonMaxLen, maxAttempts: cfg.MaxAttempts,
			claimIdle: cfg.ClaimIdle, logger: w.logger, drainCtx: w.drain, raiseToken: w.raiseToken, busy: &w.busy[i]}
		subs.Consumer, subs.First = name, i
		sub, err := stream.NewSubscriber(w.subRDB, subs)
		if err != nil {
			return err
		}
		w.consumers = append(w.consumers, c)
		chain := c.chain(w.last(), w.resolve, w.combiner.step, w.lock)
		w.router.AddConsumerHandler(name, cfg.OrdersStream, sub, func(msg *message.Message) error {
			_, err := chain(msg)
			return err
		})
	}
	return nil
}

// last is the last step of the chain: the leader of a SKU, holding its lock, decides its orders; a
// basket or lifecycle event, holding the locks of all its SKUs, is decided alone.
func (w *Worker) last() message.HandlerFunc {
	h := func(msg *message.Message) ([]*message.Message, error) {
		if o, _ := handlers.OrderOf(msg); !o.Single() {
			return nil, w.decideOrder(msg, o)
		}
		var token int64
		if lease, ok := lockmw.LeaseFrom(msg.Context()); ok {
			token = lease.Token()
		}
		return nil, w.combiner.lead(msg, token)
	}
	if w.cfg.FaultDelayWrite > 0 {
		h = delayWrite(w.cfg.FaultDelayWrite)(h)
	}
	if w.history != nil {
		h = w.recordHold(h)
	}
	if w.lock != nil && !w.fenceCounterAtStore() {
		h = w.raiseFence(h)
	}
	return h
}

// fenceCounterAtStore: the lock's fencing counters live on the stock's Redis, where the stock script
// compares with them (storeOptions).
func (w *Worker) fenceCounterAtStore() bool {
	_, reentrant := w.locker.(*rlock.Reentrant)
	return reentrant
}

// raiseFence stores the new lock's token as the SKU's fence before the order's write, for a lock whose
// counters live away from the stock (Redlock's masters): from then on the store refuses every older token,
// before this holder writes too. It costs one round trip to the stock's Redis per acquisition. A token
// below the stored fence fails as a stale fence, which the retry heals by raising the lock's counter.
func (w *Worker) raiseFence(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		for _, lease := range lockmw.LeasesFrom(msg.Context()) {
			if lease.Token() == 0 { // a lock without tokens (an embedder's): nothing to fence with
				continue
			}
			if err := w.store.RaiseFence(msg.Context(), lease.Key(), lease.Token()); err != nil {
				return nil, fmt.Errorf("message %s: %w", msg.UUID, err)
			}
		}
		return h(msg)
	}
}

// decideOrder decides a basket or lifecycle event under the locks of all its SKUs (fenced by each one's
// token), then publishes its outcome and acks its entry.
func (w *Worker) decideOrder(msg *message.Message, o handlers.Order) error {
	ctx := msg.Context()
	fences, waited := heldFences(ctx)
	out, err := w.reserver.DecideOrder(ctx, handlers.Request{Ctx: ctx, Order: o, Waited: waited}, fences)
	if err != nil {
		return err
	}
	// A lock taken alone (a basket of one SKU) is released with the outcome, as a batch's last one is;
	// several are released by the lock middleware.
	_, err = w.publish(ctx, []*pending{{msg: msg, order: o}}, []*message.Message{out}, func() bool { return false })
	return err
}

// heldFences are the tokens of the locks the lock middleware holds for the message of ctx, by SKU (nil
// without the lock: unfenced), and how long it waited for them.
func heldFences(ctx context.Context) (fences inventory.Fences, waited time.Duration) {
	for _, lease := range lockmw.LeasesFrom(ctx) {
		if fences == nil {
			fences, waited = inventory.Fences{}, rlock.StatsOf(lease).Waited
		}
		fences[lease.Key()] = lease.Token()
	}
	if ml, ok := lockmw.MultiLeaseFrom(ctx); ok {
		waited = ml.Stats().Waited
	}
	return fences, waited
}

// resolve gives a lifecycle event the lines of its order (inventory.Store.Lines), so that the lock step
// takes all their SKUs' locks. An order that is not known yet keeps the event's one SKU: the decision,
// under that lock, then refuses it as unknown (or, if it was reserved meanwhile, fails as not locked and is
// retried).
func (w *Worker) resolve(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, _ := handlers.OrderOf(msg) // decoded: it is after Decode
		if o.Kind() == handlers.TypeReserve {
			return h(msg)
		}
		lines, err := w.store.Lines(msg.Context(), o.OrderID, o.SKU)
		if err != nil && !errors.Is(err, inventory.ErrUnknownOrder) {
			return nil, fmt.Errorf("%s order %s: %w", o.Kind(), o.OrderID, err)
		}
		o.Lines = lines
		orig := msg.Context()
		msg.SetContext(handlers.WithOrder(orig, o))
		defer msg.SetContext(orig)
		return h(msg)
	}
}

// Run processes orders until ctx is done, then shuts down: it stops taking messages, lets the orders in
// flight finish within the shutdown timeout (their locks are released as they finish) and closes
// everything. It returns an error if the router stops on its own.
func (w *Worker) Run(ctx context.Context) error {
	defer w.Close()
	// Probes are answered from the start: /healthz while the worker waits for Redis, /readyz says why not.
	defer w.serveHTTP()()
	if err := w.prepare(ctx); err != nil {
		return err
	}
	hkCtx, stopHousekeeping := context.WithCancel(context.Background())
	defer stopHousekeeping()
	go w.housekeep(hkCtx)
	stopped := make(chan struct{})
	go w.shutDownWhenDone(ctx, stopped)
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
	n := 0
	for _, c := range w.consumers {
		handed, err := c.handBackPending(ctx)
		if err != nil {
			w.logger.Warn("could not hand back unfinished entries", "consumer", c.name, "err", err)
		}
		n += handed
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
	if err := w.history.Close(); err != nil {
		w.logger.Error("history file", "err", err)
	}
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
