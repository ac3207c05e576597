// Command worker consumes order events from a Redis Stream and reserves stock for them, one SKU lock at a
// time. Settings come from flags and environment variables; see README.md or run worker -h.
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

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/worker"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "worker:", err)
		}
		os.Exit(2)
	}
}

func run(args []string) error {
	var cfg worker.Config
	set := config.NewSet("worker", nil)
	worker.Flags(set, &cfg)
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
		// Flush what the exporters buffered, also after the signal ended ctx.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Error("telemetry shutdown", "err", err)
		}
	}()
	w, err := worker.New(cfg, logger, worker.Options{Metrics: tel.Metrics, Tracing: tel.Tracing})
	if err != nil {
		return err
	}
	logger.Info("worker started", "name", cfg.Name, "consumers", cfg.Concurrency, "orders", cfg.OrdersStream,
		"group", cfg.ConsumerGroup, "redlock", cfg.RedlockURLs != "")
	return w.Run(ctx)
}
