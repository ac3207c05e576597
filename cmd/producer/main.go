// Command producer publishes order events for stockflow workers and, with --wait, waits for their
// outcomes, prints a summary and checks that the stock adds up (exit status 1 when it does not).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/producer"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var cfg producer.Config
	set := config.NewSet("producer", nil)
	producer.Flags(set, &cfg)
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "producer:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var progress io.Writer
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		progress = os.Stderr
	}
	tel, err := otelsetup.Setup(ctx, "stockflow-producer", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer: telemetry:", err)
		return 2
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) // flush the publish spans
	sum, err := producer.Run(ctx, cfg, progress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		return 2
	}
	switch {
	case cfg.JSON:
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	case cfg.Wait:
		sum.Print(os.Stdout)
	default:
		fmt.Printf("run %s: %d orders published to %s\n", sum.RunID, sum.Published, cfg.OrdersStream)
	}
	if cfg.Wait && !sum.Consistent {
		return 1
	}
	return 0
}
