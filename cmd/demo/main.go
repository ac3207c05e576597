// Command demo shows stockflow working on one machine: it starts a Redis (or uses REDIS_URL), several
// workers and a producer with a hot-SKU mix, and prints the outcomes, the consistency check and the lock
// wait summary. It exits 1 when the consistency check fails.
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
	"github.com/stockflow/stockflow/internal/demo"
)

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, cfg, os.Stdout, config.Progress()); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// parseConfig reads the settings from args and the environment.
func parseConfig(args []string) (demo.Config, error) {
	var cfg demo.Config
	set := config.NewSet("demo", nil)
	demo.Flags(set, &cfg)
	return cfg, set.Parse(args)
}
