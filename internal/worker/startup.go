package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stream"
)

// errEvicting refuses a Redis that may evict keys.
var errEvicting = errors.New("worker: Redis may evict keys")

// errClusterNode refuses a Redis Cluster node addressed as one server (REDIS_CLUSTER false).
var errClusterNode = errors.New("worker: REDIS_URL is a Redis Cluster node")

// prepare runs before the first message: it waits until Redis answers, refuses a user without the
// worker's permissions, a Redis that may evict keys, a cluster node taken for one server, a Redis that may
// lose acknowledged writes (warned about, refused with REQUIRE_DURABLE) and streams laid out in another
// number of partitions (stream.Config.CheckLayout), and creates the consumer groups that do
// not exist.
//
// It waits STARTUP_TIMEOUT at most: past it, the error says so (and the worker exits 1).
func (w *Worker) prepare(ctx context.Context) error {
	budget, cancel := ctx, context.CancelFunc(func() {})
	if w.cfg.StartupTimeout > 0 {
		budget, cancel = context.WithTimeout(ctx, w.cfg.StartupTimeout)
	}
	defer cancel()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 3*time.Second) {
		err := w.prepareOnce(budget)
		if err == nil || refusesToStart(err) {
			return err
		}
		w.logger.Warn("waiting for Redis", "err", err, "in", backoff.String())
		select {
		case <-budget.Done(): // budget ends with ctx too: the shutdown is the reason then
			if ctx.Err() != nil {
				return fmt.Errorf("worker: Redis did not answer before shutdown: %w", err)
			}
			return fmt.Errorf("worker: Redis did not answer within STARTUP_TIMEOUT (%v): %w", w.cfg.StartupTimeout, err)
		case <-time.After(backoff):
		}
	}
}

// refusesToStart: err is a setup no retry mends.
func refusesToStart(err error) bool {
	for _, setup := range []error{errEvicting, errPermission, errClusterNode, errNotDurable, stream.ErrLayout} {
		if errors.Is(err, setup) {
			return true
		}
	}
	return false
}

func (w *Worker) prepareOnce(ctx context.Context) error {
	if err := w.checkPermissions(ctx); err != nil {
		return err
	}
	if err := w.checkEviction(ctx, true); err != nil {
		return err
	}
	if err := w.checkClusterNode(ctx); err != nil {
		return err
	}
	if err := w.checkDurability(ctx); err != nil {
		return err
	}
	if err := w.cfg.CheckLayout(ctx, w.rdb); err != nil {
		return err
	}
	return w.ensureGroup(ctx)
}

// checkEviction fails with errEvicting when Redis (with masters, also a Redlock master) evicts keys under
// memory pressure, unless ALLOW_EVICTION is set. The keys with a TTL are the outcome records and locks,
// exactly what a volatile-* policy evicts first: an evicted record means an order reserved twice. A Redlock
// master that does not answer is skipped (Redlock tolerates a minority); the stock Redis must answer.
func (w *Worker) checkEviction(ctx context.Context, masters bool) error {
	if w.cfg.AllowEviction {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := eachMaster(ctx, w.rdb, func(ctx context.Context, c *redis.Client) error {
		return w.evictionPolicy(ctx, c, "REDIS_URL"+nodeName(w.rdb, c))
	})
	if err != nil || !masters {
		return err
	}
	for _, c := range w.lockRDB {
		if err := w.evictionPolicy(ctx, c, "REDLOCK_URLS master "+c.Options().Addr); errors.Is(err, errEvicting) {
			return err
		}
	}
	return nil
}

// checkClusterNode refuses a cluster-enabled server when REDIS_CLUSTER is false: a SKU's keys share a slot,
// so single-SKU orders would go through, but a basket's script spans its SKUs' slots and fails with
// CROSSSLOT, which no retry mends, and the node answers MOVED for every slot it does not serve. A server
// that does not answer INFO cluster is let through (one that cannot be reached fails the other checks).
func (w *Worker) checkClusterNode(ctx context.Context) error {
	if w.cfg.Cluster {
		return nil
	}
	if info, _ := w.rdb.Info(ctx, "cluster").Result(); infoField(info, "cluster_enabled") == "1" {
		return fmt.Errorf("%w (cluster_enabled:1): set REDIS_CLUSTER=true, with the cluster's nodes in REDIS_URL", errClusterNode)
	}
	return nil
}

// eachMaster runs f on rdb, or on every master of a cluster (concurrently), returning the first error.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, f)
	}
	return f(ctx, rdb.(*redis.Client))
}

// nodeName names node c of a cluster rdb in messages: " node <address>"; "" when rdb is one server.
func nodeName(rdb redis.UniversalClient, c *redis.Client) string {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return " node " + c.Options().Addr
	}
	return ""
}

// evictionPolicy reads maxmemory_policy from INFO memory (CONFIG GET is often disabled on managed Redis).
// A server that does not report it is let through with a warning.
func (w *Worker) evictionPolicy(ctx context.Context, c *redis.Client, which string) error {
	info, err := c.Info(ctx, "memory").Result()
	var reply redis.Error
	if errors.As(err, &reply) {
		w.logger.Warn("cannot tell whether Redis evicts keys", "redis", which, "err", err)
		return nil
	} else if err != nil {
		return err
	}
	if policy := infoField(info, "maxmemory_policy"); policy != "" && policy != "noeviction" {
		return fmt.Errorf("%w: %s has maxmemory-policy %s; set it to noeviction (an evicted outcome record means an order reserved twice, an evicted lock two holders), or set ALLOW_EVICTION=true to run anyway", errEvicting, which, policy)
	}
	return nil
}

// infoField returns the value of a field of an INFO reply, "" when it has none.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// ensureGroup creates the consumer group of every partition at CONSUMER_GROUP_START where it does not exist.
func (w *Worker) ensureGroup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	group, start := w.cfg.ConsumerGroup, w.cfg.GroupStart
	if start == "0" {
		start = w.cfg.replayFrom(time.Now())
	}
	for _, p := range w.parts {
		err := w.rdb.XGroupCreateMkStream(ctx, p.Orders, group, start).Err()
		if redis.HasErrorPrefix(err, "BUSYGROUP") {
			continue
		} else if err != nil {
			return fmt.Errorf("create consumer group %s of stream %s: %w", group, p.Orders, err)
		}
		w.logGroupCreated(ctx, p.Orders, start)
	}
	return nil
}

// logGroupCreated says where the new group of stream starts, and warns when it skips entries already there.
func (w *Worker) logGroupCreated(ctx context.Context, stream, start string) {
	n, _ := w.rdb.XLen(ctx, stream).Result()
	attrs := []any{"stream", stream, "group", w.cfg.ConsumerGroup, "entries", n}
	if w.cfg.GroupStart == "$" && n > 0 {
		w.logger.Warn("created the consumer group at $: the entries already in the stream will not be processed (CONSUMER_GROUP_START=0 processes them)", attrs...)
		return
	}
	w.logger.Info("created the consumer group", append(attrs, "start", start)...)
}

// ready reports why the worker cannot do its work, or nil: the router must run, Redis answer without
// evicting, the consumer group exist, reads succeed, and no consumer hang on one message for longer
// than CLAIM_IDLE (after which other workers would take its work anyway).
func (w *Worker) ready(ctx context.Context) error {
	if !w.router.IsRunning() || w.router.IsClosed() {
		return errors.New("router not running")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := w.groupExists(ctx); err != nil {
		return err
	}
	// The Redlock masters are checked at start only: one that does not answer would make every probe wait.
	if err := w.checkEviction(ctx, false); err != nil {
		return err
	}
	return w.consuming()
}

// consuming reports reads failing for longer than readFailureGrace, or a consumer stuck on one message.
func (w *Worker) consuming() error {
	if since := w.sub.FailingSince(); !since.IsZero() && time.Since(since) > readFailureGrace {
		return fmt.Errorf("reading the orders stream has failed for %v", time.Since(since).Round(time.Second))
	}
	if d := w.consumer.Longest(); d > w.cfg.ClaimIdle {
		return fmt.Errorf("an order has been handled for %v", d.Round(time.Second))
	}
	return nil
}

// readFailureGrace is how long reads may fail (a Redis restart, a failover) before the worker is not ready.
const readFailureGrace = 5 * time.Second

// groupExists checks that every partition's consumer group exists, in one pipeline (one round trip per
// node).
func (w *Worker) groupExists(ctx context.Context) error {
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.XInfoGroupsCmd, len(w.parts))
	for i, p := range w.parts {
		cmds[i] = pipe.XInfoGroups(ctx, p.Orders)
	}
	_, _ = pipe.Exec(ctx)
	for i, p := range w.parts {
		missing := fmt.Errorf("consumer group %s of stream %s does not exist", w.cfg.ConsumerGroup, p.Orders)
		groups, err := cmds[i].Result()
		var reply redis.Error
		switch {
		case errors.As(err, &reply): // no such key, or not a stream
			return fmt.Errorf("%w: %w", missing, err)
		case err != nil:
			return fmt.Errorf("redis: %w", err)
		}
		if !slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == w.cfg.ConsumerGroup }) {
			return missing
		}
	}
	return nil
}
