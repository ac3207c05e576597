// Command demo shows stockflow working on one machine: it starts a Redis (or uses REDIS_URL), several
// workers and a producer with a hot-SKU mix, and prints the outcomes, the consistency check and the lock
// wait summary to stdout. It exits 1 when the run fails or the consistency check does, 2 for a setting,
// flag or argument it refused; its log lines (stderr), the last one included, are JSON unless stderr is a
// terminal.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
)

func main() {
	logger := config.Logger(os.Stderr, slog.LevelInfo)
	config.CaptureLogs(logger) // go-redis's and OpenTelemetry's lines in the same log
	os.Exit(config.Exit(logger, "demo", run(os.Args[1:])))
}

// run reads the settings and runs the demo; its error decides the exit code (config.ExitCode).
func run(args []string) error {
	var cfg demo.Config
	set := config.NewSet("demo", nil)
	set.NoArguments()
	demo.Flags(set, &cfg)
	if err := set.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return config.Usage(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return demo.Run(ctx, cfg, os.Stdout, config.Progress())
}
