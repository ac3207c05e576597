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

// run runs the producer and returns the exit status: 0, 1 when the stock does not add up, 2 on an error.
func run(args []string) int {
	cfg, err := parseConfig(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "stockflow-producer", false)
	if err != nil {
		return fail(fmt.Errorf("telemetry: %w", err))
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) // flush the publish spans
	sum, err := producer.Run(ctx, cfg, config.Progress())
	if err != nil {
		return fail(err)
	}
	printSummary(os.Stdout, cfg, sum)
	return exitStatus(cfg, sum)
}

// fail reports an error that stopped the producer and returns its exit status.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "producer:", err)
	return 2
}

// exitStatus is 1 when the run waited for its outcomes and the stock did not add up, 0 otherwise.
func exitStatus(cfg producer.Config, sum *producer.Summary) int {
	if cfg.Wait && !sum.Consistent {
		return 1
	}
	return 0
}

// parseConfig reads the settings from args and the environment.
func parseConfig(args []string) (producer.Config, error) {
	var cfg producer.Config
	set := config.NewSet("producer", nil)
	producer.Flags(set, &cfg)
	return cfg, set.Parse(args)
}

// printSummary prints the summary as JSON, the line of what was seeded (with --orders 0), a table (with
// --wait), or the line of what was published.
func printSummary(w io.Writer, cfg producer.Config, sum *producer.Summary) {
	switch {
	case cfg.JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	case cfg.Orders == 0:
		fmt.Fprintf(w, "stock of %d SKUs set to %d\n", sum.Seeded, cfg.SeedStock)
	case cfg.Wait:
		sum.Print(w)
	default:
		fmt.Fprintf(w, "run %s: %s to %s\n", sum.RunID, sum.PublishedText(), cfg.OrdersStream)
	}
}
