package worker

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
)

// Extension lets another main add to the worker's settings and options (the bench's choice of locker, the
// fault tests' hooks): it defines its flags on the set and returns what fills in the options once they are
// parsed.
type Extension func(*config.Set) func(Config, *Options) error

// Main is the main function of a worker process (cmd/worker, the bench's worker, the fault tests' worker):
// it reads the settings from args and the environment, sets up telemetry and runs the worker until SIGINT
// or SIGTERM. It returns the exit code: 0 after a clean shutdown, -h or --version (config.ErrVersion is a
// flag.ErrHelp), 2 for a bad setting or a failed run. ext may be nil.
func Main(name string, args []string, ext Extension) int {
	err := runMain(name, args, ext)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	return 2
}

func runMain(name string, args []string, ext Extension) error {
	cfg := DefaultConfig()
	set := config.NewSet(name, nil)
	Flags(set, &cfg)
	extend := func(Config, *Options) error { return nil }
	if ext != nil {
		extend = ext(set)
	}
	if err := set.Parse(args); err != nil {
		return err
	}
	var opts Options
	if err := extend(cfg, &opts); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "stockflow-worker", cfg.MetricsAddr != "")
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	level, _ := config.ParseLogLevel(cmp.Or(cfg.LogLevel, "info")) // validated with the settings
	logger := config.Logger(os.Stderr, level)
	// go-redis's own lines (a pool that cannot dial, say) become records of the same log: one JSON
	// object a line, whatever writes it.
	redis.SetLogger(config.RedisLogger{L: logger})
	defer flush(tel, logger.Error)
	opts.Metrics, opts.Tracing = tel.Metrics, tel.Tracing
	gogc := setGC()
	w, err := New(cfg, logger, opts)
	if err != nil {
		return err
	}
	logger.Info("worker started", "name", cfg.Name, "concurrency", cfg.Concurrency, "orders", cfg.OrdersStream,
		"partitions", cfg.OrdersPartitions, "cluster", cfg.Cluster,
		"group", cfg.ConsumerGroup, "redlock", cfg.RedlockURLs != "", "gogc", gogc)
	return w.Run(ctx)
}

// defaultGOGC is the worker's GOGC when the environment sets none. A worker's live heap is a few MB and
// it allocates about 10 KB per order, so at Go's default of 100 it collects dozens of times a second under
// load, and each collection also shrinks the stacks of its goroutines, which grow again. At 400 the heap
// may grow to 5 times the live heap (about 20 MB) between collections (docs/configuration.md).
const defaultGOGC = 400

// setGC sets the collector's target to defaultGOGC unless GOGC is in the environment (which the runtime
// read at start), and returns the target in force (-1: off).
func setGC() int {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGOGC)
	}
	percent := debug.SetGCPercent(100) // the only way to read it: set it back at once
	debug.SetGCPercent(percent)
	return percent
}

// flush flushes what the exporters buffered, also after a signal ended the run.
func flush(tel interface{ Shutdown(context.Context) error }, logError func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logError("telemetry shutdown", "err", err)
	}
}
