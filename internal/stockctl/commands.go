package stockctl

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string   // the words that select it: "poison replay"
	args    string   // its arguments, for the usage
	summary string   // one line for the usage
	flags   []string // the flags it takes besides the global ones
	noArgs  bool     // it takes flags only
	hint    string   // added to the error when a command that takes flags only is given arguments
	example string   // a command line that works, for stockctl help COMMAND (a test runs it through the parser)
	// run returns the report to print, when the command got as far as one, and the error it ends with.
	run func(ctx context.Context, a *app, args []string) (report, error)
}

// commands lists the subcommands; a longer name comes before a shorter one it starts with.
var commands = []*command{
	{name: "stock get", args: "SKU...", summary: "the same as stock SKU... (for a SKU named get, set or add)",
		example: "stockctl stock get set", run: runStockGet},
	{name: "stock set", args: "SKU N", summary: "set the available stock of SKU to N (0..10^15)",
		example: "stockctl stock set SKU-1 100", run: runStockSet},
	{name: "stock add", args: "SKU N", summary: "add N (1..10^15) to the available stock of SKU",
		example: "stockctl stock add SKU-1 50", run: runStockAdd},
	{name: "stock", args: "SKU...", summary: "available, reserved and fence of each SKU",
		example: "stockctl stock SKU-1 SKU-2 --json", run: runStockGet},
	{name: "order", args: "ORDER_ID --sku SKU", summary: "the outcome recorded for an order: status, reason, quantity or lines, fence, how long it is kept",
		flags: []string{"sku"}, example: "stockctl order ord-42 --sku SKU-1", run: runOrder},
	{name: "lock", args: "SKU", summary: "lock:{SKU} holder and lease, fencing counter, stored fence",
		example: "stockctl lock SKU-1", run: runLock},
	{name: "pending", args: "[--limit N]", summary: "consumer group, its consumers and pending entries", flags: []string{"limit", "partition"},
		noArgs: true, example: "stockctl pending --limit 20", run: runPending},
	{name: "poison list", args: "[--limit N]", summary: "poison entries, newest first", flags: []string{"limit", "partition"},
		noArgs: true, example: "stockctl poison list --limit 10 --json", run: runPoisonList},
	{name: "poison replay", args: "(--id ID [--id ID...] | --reason-contains S | --all) [--dry-run] [--force]",
		summary: "move poison entries back to the orders stream, each at most once, unless older than OUTCOME_TTL allows",
		flags:   []string{"id", "reason-contains", "all", "dry-run", "outcome-ttl", "force", "partition"},
		noArgs:  true, hint: " (use --id ID)", example: "stockctl poison replay --reason-contains 'not an integer' --dry-run",
		run: runPoisonReplay},
	{name: "consumers prune", args: "[--idle D] [--dry-run]", summary: "delete consumers idle longer than D that have no pending entries",
		flags: []string{"idle", "dry-run", "partition"}, noArgs: true, example: "stockctl consumers prune --idle 1h --dry-run",
		run: runConsumersPrune},
}

// findCommand returns the command named by the first words, and the words after its name.
func findCommand(words []string) (*command, []string, error) {
	if len(words) == 0 {
		return nil, nil, usageError("no command given")
	}
	for _, c := range commands {
		if args, ok := c.match(words); ok {
			return c, args, nil
		}
	}
	return nil, nil, usageError(fmt.Sprintf("unknown command %q", strings.Join(words, " ")))
}

// match reports whether words start with the name of c, and returns the words after it.
func (c *command) match(words []string) ([]string, bool) {
	name := strings.Fields(c.name)
	n := min(len(words), len(name))
	return words[n:], slices.Equal(words[:n], name)
}

// takes reports whether flag applies to c.
func (c *command) takes(flag string) bool {
	return slices.Contains(globalFlags, flag) || slices.Contains(c.flags, flag)
}

// exec runs c once the arguments of a command that takes none are refused.
func (c *command) exec(ctx context.Context, a *app, args []string) (report, error) {
	if c.noArgs && len(args) > 0 {
		return nil, usageError(fmt.Sprintf("%s takes no arguments, got %q%s", c.name, args, c.hint))
	}
	return c.run(ctx, a, args)
}
