// Command benchworker is the stockflow worker with a choice of lock, for the end-to-end comparison of the
// bench harness: --lock on (stockflow's lock, as cmd/worker), off (no lock: only the stock script's
// atomicity protects the stock) or redsync (go-redsync/redsync with its defaults, on REDIS_URL). Every
// other setting is cmd/worker's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/bench/internal/redsynclock"
	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/worker"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchworker:", err)
		}
		os.Exit(2)
	}
}

func run(args []string) error {
	var cfg worker.Config
	var lock string
	set := config.NewSet("benchworker", nil)
	worker.Flags(set, &cfg)
	set.String(&lock, "lock", "on", "on: stockflow's lock; off: no lock; redsync: redsync's mutex with its defaults")
	if err := set.Parse(args); err != nil {
		return err
	}
	logger := config.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "stockflow-worker", cfg.MetricsAddr != "")
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	opts := worker.Options{Metrics: tel.Metrics, Tracing: tel.Tracing}
	switch lock {
	case "on":
	case "off":
		opts.NoLock = true
	case "redsync":
		redisOpts, err := config.RedisOptions(cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("invalid REDIS_URL: %w", err)
		}
		rdb := redis.NewClient(redisOpts)
		defer rdb.Close()
		opts.Locker = redsynclock.New(redsync.New(goredis.NewPool(rdb)))
	default:
		return fmt.Errorf("invalid --lock %q: want on, off or redsync", lock)
	}
	w, err := worker.New(cfg, logger, opts)
	if err != nil {
		return err
	}
	logger.Info("bench worker started", "name", cfg.Name, "consumers", cfg.Concurrency, "lock", lock)
	return w.Run(ctx)
}
