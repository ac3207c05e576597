// Command producer publishes order events for stockflow workers and, with --wait, waits for their
// outcomes, prints a summary and checks that the stock adds up (exit status 1 when it does not, 2 for a
// setting it refused). Its log lines, the last one included, are JSON unless stderr is a terminal.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
	"github.com/stockflow/stockflow/internal/producer"
)

func main() {
	logger := config.Logger(os.Stderr, slog.LevelInfo)
	config.CaptureLogs(logger) // go-redis's and OpenTelemetry's lines in the same log
	os.Exit(config.Exit(logger, "producer", run(os.Args[1:], os.Stdout)))
}

// run runs the producer and prints its summary to stdout. Its error decides the exit code
// (config.ExitCode): 2 for a setting, flag or argument refused, 1 for a run that failed or, with --wait,
// whose stock does not add up.
func run(args []string, stdout io.Writer) error {
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "stockflow-producer", false)
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) // flush the publish spans
	sum, err := producer.Run(ctx, cfg, config.Progress())
	if err != nil {
		return err
	}
	printSummary(stdout, cfg, sum)
	if cfg.Wait && !sum.Consistent {
		return fmt.Errorf("the stock does not add up: %s", strings.Join(sum.Problems, "; "))
	}
	return nil
}

// parseConfig reads the settings from args and the environment, and checks them.
func parseConfig(args []string) (producer.Config, error) {
	var cfg producer.Config
	set := config.NewSet("producer", nil)
	set.NoArguments()
	producer.Flags(set, &cfg)
	if err := set.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, config.Usage(cfg.Validate())
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
