package stockctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/worker"
)

// Exit codes of Run.
const (
	ExitOK       = 0
	ExitFailure  = 1 // Redis unreachable, a script or command failed, the timeout passed
	ExitUsage    = 2 // unknown command, bad argument or setting
	ExitNotFound = 3 // unknown SKU, no such poison id, stream or group missing
)

// Defaults of the flags.
const (
	DefaultTimeout   = 10 * time.Second // --timeout
	DefaultLimit     = 50               // --limit of pending and poison list
	DefaultPruneIdle = time.Hour        // --idle of consumers prune
)

// options are the parsed settings and flags.
type options struct {
	worker.Streams
	redlockURLs    string
	json           bool
	timeout        time.Duration
	limit          int
	ids            idList
	reasonContains string
	all            bool
	dryRun         bool
	idle           time.Duration
	given          map[string]bool // flags given on the command line
}

// globalFlags apply to every command.
var globalFlags = []string{"redis-url", "orders-stream", "results-stream", "poison-stream", "consumer-group",
	"redlock-urls", "json", "timeout"}

func defineFlags(set *config.Set, o *options) {
	worker.StreamFlags(set, &o.Streams)
	set.String(&o.redlockURLs, "REDLOCK_URLS", "", "comma-separated Redis URLs of independent masters the locks are taken on (lock shows each)")
	set.Bool(&o.json, "json", "print JSON instead of text")
	set.Duration(&o.timeout, "timeout", DefaultTimeout, "longest time the command may take")
	set.Int(&o.limit, "limit", DefaultLimit, "pending, poison list: most entries shown")
	set.Var(&o.ids, "id", "poison replay: id of a poison entry to replay (repeatable)")
	set.String(&o.reasonContains, "reason-contains", "", "poison replay: replay the entries whose poison_reason contains this text")
	set.Bool(&o.all, "all", "poison replay: replay every poison entry")
	set.Bool(&o.dryRun, "dry-run", "poison replay, consumers prune: show what would be done, write nothing")
	set.Duration(&o.idle, "idle", DefaultPruneIdle, "consumers prune: delete consumers idle longer than this (and without pending entries)")
}

// Run runs the command in args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{given: map[string]bool{}}
	set := config.NewSet("stockctl", nil)
	set.SetOutput(io.Discard) // Run reports errors and usage itself
	set.Usage = func() {}
	defineFlags(set, o)
	words, err := splitArgs(set, args)
	if errors.Is(err, flag.ErrHelp) || (err == nil && len(words) == 1 && words[0] == "help") {
		printUsage(stdout, set)
		return ExitOK
	}
	set.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	if err == nil {
		err = runCommand(ctx, o, words, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "stockctl:", err)
		if code := exitCode(err); code == ExitUsage {
			fmt.Fprintln(stderr, "Run 'stockctl -h' for usage.")
		}
	}
	return exitCode(err)
}

func runCommand(ctx context.Context, o *options, words []string, stdout io.Writer) error {
	cmd, args, err := findCommand(words)
	if err != nil {
		return err
	}
	if err := checkFlags(cmd, o); err != nil {
		return err
	}
	a, err := newApp(o, stdout)
	if err != nil {
		return err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return cmd.run(ctx, a, args)
}

// negativeNumber is an argument such as the N of "stock set SKU -1", which the flag package would take
// for an unknown flag; it reaches the command, whose message names it.
var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// splitArgs parses the flags wherever they stand and returns the other words in order.
func splitArgs(set *config.Set, args []string) ([]string, error) {
	var words []string
	for {
		if err := set.Parse(args); err != nil {
			return nil, asUsage(err)
		}
		rest := set.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" { // everything after -- is a word
			return append(words, rest...), nil
		}
		words, args = append(words, rest[0]), rest[1:]
		for len(args) > 0 && negativeNumber.MatchString(args[0]) {
			words, args = append(words, args[0]), args[1:]
		}
	}
}

// checkFlags refuses a flag that the command does not use, so a mistyped command line does not quietly
// do something else.
func checkFlags(cmd *command, o *options) error {
	for name := range o.given {
		if !slices.Contains(globalFlags, name) && !slices.Contains(cmd.flags, name) {
			return usageError(fmt.Sprintf("--%s does not apply to %q", name, cmd.name))
		}
	}
	if o.timeout <= 0 {
		return usageError(fmt.Sprintf("invalid --timeout %v: must be positive", o.timeout))
	}
	if o.limit < 1 {
		return usageError(fmt.Sprintf("invalid --limit %d: want at least 1", o.limit))
	}
	if o.idle < 0 {
		return usageError(fmt.Sprintf("invalid --idle %v: must not be negative", o.idle))
	}
	return nil
}

// idList is a repeatable string flag.
type idList []string

func (l *idList) String() string     { return strings.Join(*l, ",") }
func (l *idList) Set(s string) error { *l = append(*l, s); return nil }

// Settings returns the settings stockctl reads, for documentation and its tests.
func Settings() []config.Param {
	set := config.NewSet("stockctl", func(string) (string, bool) { return "", false })
	defineFlags(set, &options{})
	return set.Params()
}
