// Command stockctl is the operator CLI of stockflow: stock, locks, pending entries, poison entries and
// consumers. See internal/stockctl for the commands and exit codes, or run stockctl -h.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stockctl"
)

func main() {
	log := config.Logger(os.Stderr, slog.LevelInfo)
	// go-redis's own lines (a failed dial) become records of the same log: one JSON object a line.
	config.CaptureLogs(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := stockctl.Run(ctx, os.Args[1:], os.Stdout, log)
	stop()
	os.Exit(code)
}
