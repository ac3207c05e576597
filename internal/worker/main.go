package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/otelsetup"
)

// Extension lets another main add to the worker's settings and options (the bench's choice of locker, the
// fault tests' hooks): it defines its flags on the set and returns what fills in the options once they are
// parsed.
type Extension func(*config.Set) func(Config, *Options) error

// Main is the main function of a worker process (cmd/worker, the bench's worker, the fault tests' worker):
// it reads the settings from args and the environment, sets up telemetry and runs the worker until SIGINT
// or SIGTERM. It returns the exit code (config.ExitCode): 0 after a clean shutdown, -h or --version, 2 for
// a setting, flag or argument it refused, 1 for a run that failed (Redis unreachable within
// STARTUP_TIMEOUT, refused by Redis, the router stopped). Every line it writes to standard error is a
// record of one log, JSON unless standard error is a terminal; the last one says why it exited. ext may be
// nil.
//
// With ProbeCommand first ("worker probe") it runs no worker but asks the one serving on METRICS_ADDR
// whether it is ready (probe): 0 when it is, 1 when not or when nothing answers, 2 for a setting or flag
// it refused, with the same last line.
func Main(name string, args []string, ext Extension) int {
	level := new(slog.LevelVar)
	logger := config.Logger(os.Stderr, level)
	// go-redis's and OpenTelemetry's own lines (a pool that cannot dial, an exporter that cannot export)
	// become records of the same log: one JSON object a line, whatever writes it.
	config.CaptureLogs(logger)
	if len(args) > 0 && args[0] == ProbeCommand {
		probeName := name + " " + ProbeCommand
		return config.Exit(logger, probeName, probe(probeName, args[1:]))
	}
	return config.Exit(logger, name, runMain(name, args, ext, logger, level))
}

func runMain(name string, args []string, ext Extension, logger *slog.Logger, level *slog.LevelVar) error {
	cfg, set, opts, err := parseSettings(name, args, ext)
	if err != nil {
		return err
	}
	parsed, _ := config.ParseLogLevel(cmp.Or(cfg.LogLevel, "info")) // validated with the settings
	level.Set(parsed)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "stockflow-worker", cfg.MetricsAddr != "")
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer flush(tel, logger.Error)
	opts.Metrics, opts.Tracing = tel.Metrics, tel.Tracing
	gogc := setGC()
	w, err := New(cfg, logger, opts)
	if err != nil {
		return err
	}
	logger.Info("worker started", append(startAttrs(cfg, set), "gogc", gogc)...)
	return w.Run(ctx)
}

// parseSettings reads and checks the settings, those of ext included; its errors are usage errors.
func parseSettings(name string, args []string, ext Extension) (Config, *config.Set, Options, error) {
	cfg, opts := DefaultConfig(), Options{}
	set := config.NewSet(name, nil)
	set.NoArguments()
	Flags(set, &cfg)
	settingsHelp := set.FlagSet.Usage
	set.FlagSet.Usage = func() {
		settingsHelp()
		fmt.Fprintf(set.Output(), "\n%s %s asks the worker serving on METRICS_ADDR whether it is ready, for a healthcheck:\n"+
			"exit 0 when its /readyz answers 200, else 1 with the reason (%s %s -h lists its settings).\n",
			name, ProbeCommand, name, ProbeCommand)
	}
	extend := func(Config, *Options) error { return nil }
	if ext != nil {
		extend = ext(set)
	}
	if err := set.Parse(args); err != nil {
		return cfg, set, opts, err
	}
	err := cmp.Or(cfg.Validate(), extend(cfg, &opts))
	return cfg, set, opts, config.Usage(err)
}

// startAttrs are the attributes of the start line: the settings that say what the worker works on, with
// the Redis it uses (its password redacted) and where REDIS_URL came from ("default" when it was not set:
// on a shared machine the default may be someone else's Redis), and the build.
func startAttrs(cfg Config, set *config.Set) []any {
	return []any{"name", cfg.Name, "redis", config.RedactURL(cfg.RedisURL), "redis_url_from", set.Source("REDIS_URL"),
		"concurrency", cfg.Concurrency, "orders", cfg.OrdersStream, "partitions", cfg.OrdersPartitions,
		"cluster", cfg.Cluster, "group", cfg.ConsumerGroup, "redlock", cfg.RedlockURLs != "", config.BuildAttr()}
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
