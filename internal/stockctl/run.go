package stockctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/inventory"
)

// Defaults of the flags.
const (
	DefaultTimeout   = 10 * time.Second // --timeout
	DefaultLimit     = 50               // --limit of pending and poison list
	DefaultPruneIdle = time.Hour        // --idle of consumers prune
)

// options are the parsed settings and flags.
type options struct {
	stream.Config
	redlockURLs    string
	json           bool
	timeout        time.Duration
	limit          int
	ids            idList
	reasonContains string
	all            bool
	dryRun         bool
	outcomeTTL     time.Duration
	force          bool
	idle           time.Duration
	partition      int
	sku            string
	given          map[string]bool // flags given on the command line
}

// globalFlags apply to every command.
var globalFlags = []string{"redis-url", "redis-tls-ca-file", "redis-tls-cert-file", "redis-tls-key-file",
	"orders-stream", "results-stream", "poison-stream", "consumer-group", "redis-cluster", "orders-partitions",
	"redlock-urls", "json", "timeout"}

func defineFlags(set *config.Set, o *options) {
	stream.Flags(set, &o.Config)
	set.URLList(&o.redlockURLs, "REDLOCK_URLS", "", "comma-separated Redis URLs of independent masters the locks are taken on (lock shows each)")
	set.Bool(&o.json, "json", "print JSON instead of text")
	set.Duration(&o.timeout, "timeout", DefaultTimeout, "longest time the command may take")
	set.Int(&o.limit, "limit", DefaultLimit, "pending, poison list: most entries shown")
	set.Var(&o.ids, "id", "poison replay: `id` of a poison entry to replay (repeatable)")
	set.String(&o.reasonContains, "reason-contains", "", "poison replay: replay the entries whose poison_reason contains this `text`")
	set.Bool(&o.all, "all", "poison replay: replay every poison entry")
	set.Bool(&o.dryRun, "dry-run", "poison replay, consumers prune: show what would be done, write nothing")
	set.Duration(&o.outcomeTTL, "OUTCOME_TTL", inventory.DefaultOutcomeTTL, "poison replay: the workers' OUTCOME_TTL; an entry whose order was first published longer ago (less a margin) is not replayed")
	set.Bool(&o.force, "force", "poison replay: replay entries too old for their outcome records all the same (an order that reached the stock may be reserved again)")
	set.Duration(&o.idle, "idle", DefaultPruneIdle, "consumers prune: delete consumers idle longer than this (and without pending entries)")
	set.String(&o.sku, "sku", "", "order: the `SKU` of the order whose record is read (any SKU of a basket)")
	set.Int(&o.partition, "partition", 0, "pending, poison, consumers: the partition whose streams they look at (with ORDERS_PARTITIONS or REDIS_CLUSTER)")
}

// Run runs the command in args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{given: map[string]bool{}}
	set := newFlagSet(o)
	set.SetVersionOutput(stdout)
	words, err := splitArgs(set, args)
	if errors.Is(err, config.ErrVersion) { // printed
		return ExitOK
	}
	if topic, isHelp := helpWords(words, err); isHelp {
		return printHelp(stdout, stderr, set, topic)
	}
	set.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	if err == nil {
		err = runCommand(ctx, o, words, stdout)
	}
	printError(stderr, err)
	return exitCode(err)
}

// helpWords reports whether the command line asks for help (-h anywhere, or the command help), and the
// words that say about what: "poison replay -h" and "help poison replay" both ask about poison replay.
func helpWords(words []string, err error) ([]string, bool) {
	switch {
	case len(words) > 0 && words[0] == "help" && (err == nil || errors.Is(err, flag.ErrHelp)):
		return words[1:], true
	case errors.Is(err, flag.ErrHelp):
		return words, true
	}
	return nil, false
}

// newFlagSet defines the settings and flags on o; Run reports errors and usage itself.
func newFlagSet(o *options) *config.Set {
	set := config.NewSet("stockctl", nil)
	set.SetOutput(io.Discard)
	set.Usage = func() {}
	defineFlags(set, o)
	return set
}

// runCommand checks the command line before it opens the clients, and runs the command within --timeout.
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
	return a.finish(cmd.exec(ctx, a, args))
}

func printError(stderr io.Writer, err error) {
	if err == nil {
		return
	}
	fmt.Fprintln(stderr, "stockctl:", err)
	if exitCode(err) == ExitUsage {
		fmt.Fprintln(stderr, "Run 'stockctl -h' for usage.")
	}
}

// negativeNumber is an argument such as the N of "stock set SKU -1", which the flag package would take
// for an unknown flag; it reaches the command, whose message names it.
var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// splitArgs parses the flags wherever they stand and returns the other words in order; after an error,
// the words before the flag that failed (those -h was given after).
func splitArgs(set *config.Set, args []string) ([]string, error) {
	var words []string
	for {
		if err := set.Parse(args); err != nil {
			return words, asUsage(err)
		}
		rest := set.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if afterDashes(args, rest) {
			return append(words, rest...), nil
		}
		n := wordsAhead(rest)
		words, args = append(words, rest[:n]...), rest[n:]
	}
}

// afterDashes reports whether the flag set stopped at "--": everything after it is a word.
func afterDashes(args, rest []string) bool {
	i := len(args) - len(rest)
	return i > 0 && args[i-1] == "--"
}

// wordsAhead counts the words at the start of rest: the first one and the negative numbers after it.
func wordsAhead(rest []string) int {
	n := 1
	for n < len(rest) && negativeNumber.MatchString(rest[n]) {
		n++
	}
	return n
}

// checkFlags refuses a flag that the command does not use, so a mistyped command line does not quietly
// do something else, and then the values that cannot work.
func checkFlags(cmd *command, o *options) error {
	for name := range o.given {
		if !cmd.takes(name) {
			return usageError(fmt.Sprintf("--%s does not apply to %q", name, cmd.name))
		}
	}
	return asUsage(o.check())
}

// check refuses the values of the flags and settings that cannot work, naming the first.
func (o *options) check() error {
	return firstErr(
		config.Check(o.timeout > 0, "--timeout", o.timeout, "must be positive"),
		config.Check(o.limit >= 1, "--limit", o.limit, "want at least 1"),
		config.Check(o.idle >= 0, "--idle", o.idle, "must not be negative"),
		config.Check(o.outcomeTTL >= time.Minute, "OUTCOME_TTL", o.outcomeTTL, "want at least 1m, as the worker"),
		config.CheckNotEmpty("ORDERS_STREAM", o.OrdersStream),
		config.CheckNotEmpty("POISON_STREAM", o.PoisonStream),
		config.CheckNotEmpty("CONSUMER_GROUP", o.ConsumerGroup),
		o.Validate(),
		config.Check(o.partition >= 0 && o.partition < max(o.OrdersPartitions, 1), "--partition", o.partition,
			fmt.Sprintf("want 0..%d (ORDERS_PARTITIONS is %d)", max(o.OrdersPartitions, 1)-1, o.OrdersPartitions)))
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
