package stockctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stockflow/stockflow/internal/config"
)

// runFunc runs one command: it returns the report to print, when the command got as far as one, and the
// error it ends with.
type runFunc func(ctx context.Context, a *app, args []string) (report, error)

// newRoot builds the commands on o; the settings read the environment through env (the process's when nil).
func newRoot(o *options, env func(string) (string, bool)) *cobra.Command {
	root := &cobra.Command{
		Use:   "stockctl",
		Short: "the operator CLI of stockflow",
		Long: "stockctl shows and sets stock, shows a SKU's lock, the consumer group and the SKUs that wait longest for\n" +
			"their lock, lists and replays poison entries, and prunes dead consumers. A command given no name lists\n" +
			"(stockctl stock, stockctl consumers, stockctl poison). Settings are the workers' environment variables,\n" +
			"each also a flag; the flag wins.\n" + exitCodesHelp,
		SilenceErrors: true, SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return o.load(cmd) },
		RunE:              func(*cobra.Command, []string) error { return usageError("no command given") },
	}
	pf := root.PersistentFlags()
	o.defineSettings(pf, env)
	pf.StringVarP(&o.output, "output", "o", "text", "output `format`: text, wide (more columns), json or yaml; durations are in milliseconds (fields *_ms)")
	pf.BoolVar(&o.json, "json", false, "the same as -o json")
	pf.DurationVar(&o.timeout, "timeout", DefaultTimeout, "longest `duration` the command may take")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputs, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return config.Usage(err) })
	setHelp(root)
	root.AddCommand(o.stockCommand(), o.orderCommand(), o.lockCommand(), o.pendingCommand(), o.consumersCommand(),
		o.poisonCommand(), o.hotCommand())
	return root
}

// command is a command that runs run; args checks its arguments before anything is read.
func (o *options) command(use, short, example string, args cobra.PositionalArgs, run runFunc) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Example: "  " + example, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error { return o.exec(cmd.Context(), run, args) }}
}

// noArgs refuses arguments: a command that lists when given no name names its subcommands on a typo.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets on the root only
	if suggestions := cmd.SuggestionsFor(args[0]); len(suggestions) > 0 {
		return usageError(fmt.Sprintf("unknown command %q for %q\n\nDid you mean this?\n\t%s", args[0], cmd.CommandPath(),
			strings.Join(suggestions, "\n\t")))
	}
	if cmd.HasSubCommands() {
		return usageError(fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath()))
	}
	return usageError(fmt.Sprintf("%s takes no arguments, got %q", cmd.CommandPath(), args))
}

func (o *options) stockCommand() *cobra.Command {
	stock := o.command("stock [SKU...]", "available, reserved and fence of each SKU; without one, of the SKUs stocked (up to --limit)",
		"stockctl stock SKU-1 SKU-2 -o json", cobra.ArbitraryArgs, runStock)
	o.limitFlag(stock.Flags(), "SKUs (without SKUs given)")
	stock.AddCommand(
		o.command("get SKU...", "the same as stock SKU... (for a SKU named get, set or add)", "stockctl stock get set",
			cobra.ArbitraryArgs, runStockGet),
		o.command("set SKU N", "set the available stock of SKU to N (0..10^15)", "stockctl stock set SKU-1 100",
			cobra.ArbitraryArgs, runStockSet),
		o.command("add SKU N", "add N (1..10^15) to the available stock of SKU", "stockctl stock add SKU-1 50",
			cobra.ArbitraryArgs, runStockAdd))
	return stock
}

func (o *options) orderCommand() *cobra.Command {
	order := o.command("order ORDER_ID --sku SKU", "the outcome recorded for an order: status, reason, quantity or lines, fence, how long it is kept",
		"stockctl order ord-42 --sku SKU-1", cobra.ArbitraryArgs, runOrder)
	order.Flags().StringVar(&o.sku, "sku", "", "the `SKU` of the order whose record is read (any SKU of a basket)")
	return order
}

func (o *options) lockCommand() *cobra.Command {
	return o.command("lock SKU", "lock:{SKU} holder and lease, fencing counter, stored fence", "stockctl lock SKU-1",
		cobra.ArbitraryArgs, runLock)
}

func (o *options) pendingCommand() *cobra.Command {
	pending := o.command("pending", "consumer group, its consumers and its oldest pending entries", "stockctl pending --limit 20",
		noArgs, runPending)
	o.limitFlag(pending.Flags(), "pending entries")
	o.partitionFlag(pending.Flags())
	return pending
}

func (o *options) consumersCommand() *cobra.Command {
	consumers := o.command("consumers", "the consumers of the group: pending entries, idle and inactive time", "stockctl consumers -o wide",
		noArgs, runConsumers)
	o.partitionFlag(consumers.PersistentFlags())
	prune := o.command("prune", "delete consumers idle longer than --idle that have no pending entries",
		"stockctl consumers prune --idle 1h --dry-run", noArgs, runConsumersPrune)
	prune.Flags().DurationVar(&o.idle, "idle", DefaultPruneIdle, "delete consumers idle longer than this `duration` (and without pending entries)")
	o.dryRunFlag(prune.Flags())
	consumers.AddCommand(prune)
	return consumers
}

func (o *options) poisonCommand() *cobra.Command {
	poison := o.command("poison", "the same as poison list", "stockctl poison", noArgs, runPoisonList)
	list := o.command("list", "poison entries, newest first", "stockctl poison list --limit 10 -o json", noArgs, runPoisonList)
	replay := o.command("replay (--id ID... | --reason-contains TEXT | --all) [--dry-run] [--force]",
		"move poison entries back to the orders stream, each at most once, unless older than OUTCOME_TTL allows",
		"stockctl poison replay --reason-contains 'not an integer' --dry-run", noArgs, runPoisonReplay)
	f := replay.Flags()
	f.StringArrayVar(&o.ids, "id", nil, "`id` of a poison entry to replay (repeatable)")
	f.StringVar(&o.reasonContains, "reason-contains", "", "replay the entries whose poison_reason contains this `text`")
	f.BoolVar(&o.all, "all", false, "replay every poison entry")
	f.BoolVar(&o.force, "force", false, "replay entries too old for their outcome records all the same (an order that reached the stock may be reserved again)")
	o.dryRunFlag(f)
	for _, c := range []*cobra.Command{poison, list} {
		o.limitFlag(c.Flags(), "entries, the newest")
	}
	o.partitionFlag(poison.PersistentFlags())
	poison.AddCommand(list, replay)
	return poison
}

// limitFlag defines --limit: show at most n of what.
func (o *options) limitFlag(fs *pflag.FlagSet, what string) {
	fs.IntVar(&o.limit, "limit", DefaultLimit, "show at most `n` "+what)
}

func (o *options) partitionFlag(fs *pflag.FlagSet) {
	fs.IntVar(&o.partition, "partition", 0, "the partition `n` whose streams are looked at (with ORDERS_PARTITIONS or REDIS_CLUSTER)")
}

func (o *options) dryRunFlag(fs *pflag.FlagSet) {
	fs.BoolVar(&o.dryRun, "dry-run", false, "show what would be done, write nothing")
}
