// Command stockctl is the operator CLI of stockflow: stock, locks, pending entries, poison entries and
// consumers. See internal/stockctl for the commands and exit codes, or run stockctl -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stockctl"
)

// quiet drops go-redis's own log lines (a failed dial, once per retry): the command reports the error.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := stockctl.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
