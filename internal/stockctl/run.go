package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/hot"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/inventory"
)

// Defaults of the flags.
const (
	DefaultTimeout   = 10 * time.Second // --timeout
	DefaultLimit     = 50               // --limit of the commands that list
	DefaultPruneIdle = time.Hour        // --idle of consumers prune
)

// options are the parsed settings and flags.
type options struct {
	stream.Config
	redlockURLs    string
	output         string // -o: text, wide, json or yaml
	json           bool   // --json: -o json
	timeout        time.Duration
	limit          int
	ids            []string
	reasonContains string
	all            bool
	dryRun         bool
	outcomeTTL     time.Duration
	force          bool
	idle           time.Duration
	partition      int
	sku            string
	since          time.Duration  // hot
	top            int            // hot's --limit
	jaegerURL      string         // hot
	sortBy         string         // hot
	flags          *pflag.FlagSet // the command's, parsed
	settings       *config.Set    // the settings read from the environment, global flags too
	stdout         io.Writer
	log            *slog.Logger // standard error
}

// Output formats of -o.
var outputs = []string{"text", "wide", "json", "yaml"}

// Run runs the command in args (without the program name) and returns the exit code (config.ExitCode).
// Reports, help and completion scripts go to stdout; standard error has log's records only: the last says
// why the command failed (config.Exit), and anything cobra writes there is a warning of log.
func Run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) int {
	o := &options{stdout: stdout, log: log}
	root := newRoot(o, nil)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(slog.NewLogLogger(log.Handler(), slog.LevelWarn).Writer())
	err := root.ExecuteContext(ctx)
	var coded interface{ ExitCode() int }
	if err != nil && !errors.As(err, &coded) && !errors.Is(err, config.ErrUsage) && !errors.Is(err, config.ErrVersion) {
		err = config.Usage(err) // cobra's own: an unknown command, an argument its help command refuses
	}
	return config.Exit(log, "stockctl", err)
}

// defineSettings defines the settings of the workers that stockctl reads, each an environment variable
// (read now, from env: the process's when nil) and a global flag, and --version.
func (o *options) defineSettings(fs *pflag.FlagSet, env func(string) (string, bool)) {
	set := config.NewSet("stockctl", env)
	set.SetVersionOutput(o.stdout)
	stream.Flags(set, &o.Config)
	set.URLList(&o.redlockURLs, "REDLOCK_URLS", "", "comma-separated Redis URLs of independent masters the locks are taken on (lock shows each)")
	set.Duration(&o.outcomeTTL, "OUTCOME_TTL", inventory.DefaultOutcomeTTL, "poison replay: the workers' OUTCOME_TTL; an entry whose order was first published longer ago (less a margin) is not replayed")
	fs.AddGoFlagSet(set.FlagSet)
	annotate(fs, set)
	o.settings = set
}

// load reads the settings (the environment, then the flags cobra parsed) and checks them, before any
// command runs: a bad value is a usage error naming it, and --version prints the version instead.
func (o *options) load(cmd *cobra.Command) error {
	if err := o.settings.Parse(nil); err != nil {
		if errors.Is(err, config.ErrVersion) {
			return err
		}
		return config.Usage(err)
	}
	o.flags = cmd.Flags()
	if o.json {
		if o.given("output") && o.output != "json" {
			return usageError("--json is -o json: give one of them")
		}
		o.output = "json"
	}
	return config.Usage(o.check())
}

// given reports whether flag name was given on the command line.
func (o *options) given(name string) bool { return o.flags != nil && o.flags.Changed(name) }

// check refuses the values of the flags and settings that cannot work, naming the first.
func (o *options) check() error {
	return firstErr(
		config.Check(o.output == "" || slices.Contains(outputs, o.output), "-o", o.output, "want text, wide, json or yaml"),
		config.Check(o.timeout > 0, "--timeout", o.timeout, "must be positive"),
		config.Check(o.limit >= 1, "--limit", o.limit, "want at least 1"),
		config.Check(o.idle >= 0, "--idle", o.idle, "must not be negative"),
		config.Check(o.top >= 1, "--limit", o.top, "want at least 1"),
		config.Check(slices.Contains(hotSorts, o.sortBy), "--sort-by", o.sortBy, "want "+strings.Join(hotSorts, ", ")),
		config.Check(o.since > 0 && o.since <= hot.Retention, "--since", o.since, fmt.Sprintf("want more than 0s and at most %s (what the workers keep)", hot.Retention)),
		config.Check(o.outcomeTTL >= time.Minute, "OUTCOME_TTL", o.outcomeTTL, "want at least 1m, as the worker"),
		config.CheckNotEmpty("ORDERS_STREAM", o.OrdersStream),
		config.CheckNotEmpty("POISON_STREAM", o.PoisonStream),
		config.CheckNotEmpty("CONSUMER_GROUP", o.ConsumerGroup),
		o.Validate(),
		config.Check(o.partition >= 0 && o.partition < max(o.OrdersPartitions, 1), "--partition", o.partition,
			fmt.Sprintf("want 0..%d (ORDERS_PARTITIONS is %d)", max(o.OrdersPartitions, 1)-1, o.OrdersPartitions)))
}

// exec runs a command's run within --timeout, prints its report and returns its error, a failure unless
// it says otherwise.
func (o *options) exec(ctx context.Context, run runFunc, args []string) error {
	a, err := newApp(o, o.stdout)
	if err != nil {
		return err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err = a.finish(run(ctx, a, args))
	if err != nil && config.ExitCode(err) == ExitFailure {
		return &codeError{code: ExitFailure, err: err}
	}
	return err
}

// Settings returns the global settings and flags (stockctl -h lists them), for documentation and tests.
func Settings() []config.Param {
	var params []config.Param
	root := newRoot(&options{}, func(string) (string, bool) { return "", false })
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			params = append(params, paramOf(f))
		}
	})
	return params
}

// CommandFlags returns the flags of each command but the global ones (Settings), by the command's path
// without "stockctl" ("poison replay"), for documentation and tests. A command's flags include those it
// inherits from its family ("consumers prune": --partition of consumers).
func CommandFlags() map[string][]config.Param {
	out := map[string][]config.Param{}
	root := newRoot(&options{}, func(string) (string, bool) { return "", false })
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			path := strings.TrimPrefix(sub.CommandPath(), root.Name()+" ")
			sub.LocalFlags() // merges the families' flags into sub.Flags(): the command's own and those it inherits
			sub.Flags().VisitAll(func(f *pflag.Flag) {
				if root.PersistentFlags().Lookup(f.Name) == nil {
					out[path] = append(out[path], paramOf(f))
				}
			})
			walk(sub)
		}
	}
	walk(root)
	return out
}
