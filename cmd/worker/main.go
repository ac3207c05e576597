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

	"github.com/stockflow/stockflow/internal/config"
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
	w, err := worker.New(cfg, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger.Info("worker started", "name", cfg.Name, "consumers", cfg.Concurrency, "orders", cfg.OrdersStream,
		"group", cfg.ConsumerGroup, "redlock", cfg.RedlockURLs != "")
	return w.Run(ctx)
}
