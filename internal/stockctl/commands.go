package stockctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stockflow/stockflow/internal/config"
)

// command is one subcommand.
type command struct {
	name    string   // the words that select it: "poison replay"
	args    string   // its arguments, for the usage
	summary string   // one line for the usage
	flags   []string // the flags it takes besides the global ones
	run     func(ctx context.Context, a *app, args []string) error
}

// commands lists the subcommands; a longer name comes before a shorter one it starts with.
var commands = []*command{
	{name: "stock get", args: "SKU...", summary: "the same as stock SKU... (for a SKU named get, set or add)", run: runStockGet},
	{name: "stock set", args: "SKU N", summary: "set the available stock of SKU to N (0..10^15)", run: runStockSet},
	{name: "stock add", args: "SKU N", summary: "add N (1..10^15) to the available stock of SKU", run: runStockAdd},
	{name: "stock", args: "SKU...", summary: "available, reserved and fence of each SKU", run: runStockGet},
	{name: "lock", args: "SKU", summary: "lock:{SKU} holder and lease, fencing counter, stored fence", run: runLock},
	{name: "pending", args: "[--limit N]", summary: "consumer group, its consumers and pending entries", flags: []string{"limit"}, run: runPending},
	{name: "poison list", args: "[--limit N]", summary: "poison entries, newest first", flags: []string{"limit"}, run: runPoisonList},
	{name: "poison replay", args: "(--id ID [--id ID...] | --reason-contains S | --all) [--dry-run]",
		summary: "move poison entries back to the orders stream, each at most once", flags: []string{"id", "reason-contains", "all", "dry-run"}, run: runPoisonReplay},
	{name: "consumers prune", args: "[--idle D] [--dry-run]", summary: "delete consumers idle longer than D that have no pending entries",
		flags: []string{"idle", "dry-run"}, run: runConsumersPrune},
}

// findCommand returns the command named by the first words, and the words after its name.
func findCommand(words []string) (*command, []string, error) {
	if len(words) == 0 {
		return nil, nil, usageError("no command given")
	}
	for _, c := range commands {
		name := strings.Fields(c.name)
		if len(words) >= len(name) && strings.Join(words[:len(name)], " ") == c.name {
			return c, words[len(name):], nil
		}
	}
	return nil, nil, usageError(fmt.Sprintf("unknown command %q", strings.Join(words, " ")))
}

func printUsage(w io.Writer, set *config.Set) {
	fmt.Fprint(w, "Usage: stockctl [flags] COMMAND [ARGS] [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, "\nFlags (a setting with an env variable reads it; the flag wins):\n")
	for _, p := range set.Params() {
		env := ""
		if p.Env != "" {
			env = "env " + p.Env + ", "
		}
		fmt.Fprintf(w, "  %s (%sdefault %q)\n        %s\n", p.Flag, env, p.Default, p.Usage)
	}
	fmt.Fprint(w, `
Exit codes:
  0  success
  1  operational failure: Redis unreachable, a script or command error, the timeout
  2  usage error: unknown command, bad argument or setting; nothing was written
  3  not found: unknown SKU, no such poison entry id, stream or group missing
`)
}

// codeError is an error with the exit code it ends the command with.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func usageError(msg string) error { return &codeError{code: ExitUsage, err: errors.New(msg)} }

// asUsage marks err (an invalid argument) as a usage error.
func asUsage(err error) error { return &codeError{code: ExitUsage, err: err} }

func notFound(msg string) error { return &codeError{code: ExitNotFound, err: errors.New(msg)} }

func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ce):
		return ce.code
	}
	return ExitFailure
}
