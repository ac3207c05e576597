// Command demo shows stockflow working on one machine: it starts a Redis (or uses REDIS_URL), several
// workers and a producer with a hot-SKU mix, and prints the outcomes, the consistency check and the lock
// wait summary. It exits 1 when the consistency check fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
)

func main() {
	var cfg demo.Config
	set := config.NewSet("demo", nil)
	demo.Flags(set, &cfg)
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var progress io.Writer
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		progress = os.Stderr
	}
	if err := demo.Run(ctx, cfg, os.Stdout, progress); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
