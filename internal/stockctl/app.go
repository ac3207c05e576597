package stockctl

import (
	"context"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/inventory"
)

// app is what a command works with: the settings, the Redis clients and the output.
type app struct {
	opts    *options
	rdb     redis.UniversalClient // REDIS_URL: streams and stock
	masters []*redis.Client       // REDLOCK_URLS, empty without Redlock
	store   *inventory.Store
	stdout  io.Writer
}

// newApp makes the clients of the checked settings; they connect on their first command. The stream
// commands look at the streams of partition --partition.
func newApp(o *options, stdout io.Writer) (*app, error) {
	if err := o.ValidateRedis(); err != nil {
		return nil, config.Usage(err)
	}
	masters, err := o.TLS.RedisURLs(o.redlockURLs)
	if err != nil {
		return nil, config.Usage(fmt.Errorf("invalid REDLOCK_URLS: %w", err))
	}
	rdb, err := o.Client(0)
	if err != nil {
		return nil, config.Usage(err)
	}
	// As the worker's start line does (redis_url_from): on a shared machine the default may be someone
	// else's Redis. cobra sets --redis-url, which config's Source does not see.
	if !o.given("redis-url") && o.settings.Source("REDIS_URL") == "default" {
		o.log.Warn("REDIS_URL is not set: stockctl uses the default Redis", "redis", config.RedactURL(o.RedisURL),
			"redis_url_from", "default")
	}
	p := o.Partitions()[o.partition]
	o.OrdersStream, o.ResultsStream, o.PoisonStream = p.Orders, p.Results, p.Poison
	return &app{opts: o, rdb: rdb, masters: newClients(masters), store: inventory.New(rdb), stdout: stdout}, nil
}

func newClients(opts []*redis.Options) []*redis.Client {
	var clients []*redis.Client
	for _, o := range opts {
		clients = append(clients, redis.NewClient(o))
	}
	return clients
}

func (a *app) close() {
	_ = a.rdb.Close()
	for _, m := range a.masters {
		_ = m.Close()
	}
}

// finish prints the report of a command, if it got as far as one, and returns the error the command
// ends with. A failure part-way is that error: the report shows how far the command got. Otherwise a
// failure to print comes first, then the command's own verdict (a not-found).
func (a *app) finish(r report, err error) error {
	if r == nil {
		return err
	}
	if printErr := a.emit(r); printErr != nil && config.ExitCode(err) != ExitFailure {
		return printErr
	}
	return err
}

// forEach hands each item to step in turn and each result to add. It stops at the first error, which a
// command returns with its report of the steps done.
func forEach[T, R any](ctx context.Context, items []T, step func(context.Context, T) (R, error), add func(R)) error {
	for _, item := range items {
		res, err := step(ctx, item)
		if err != nil {
			return err
		}
		add(res)
	}
	return nil
}

// mapEach hands each item to step in turn and returns the results; it stops at the first error.
func mapEach[T, R any](ctx context.Context, items []T, step func(context.Context, T) (R, error)) ([]R, error) {
	out := make([]R, 0, len(items))
	err := forEach(ctx, items, step, func(res R) { out = append(out, res) })
	return out, err
}

// convert maps each item of a reply to what a report shows of it.
func convert[T, R any](items []T, f func(T) R) []R {
	out := make([]R, len(items))
	for i, item := range items {
		out[i] = f(item)
	}
	return out
}
