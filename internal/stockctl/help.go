package stockctl

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/stockflow/stockflow/internal/config"
)

// Help: "stockctl -h" and "stockctl help" list the commands, the flags and the exit codes;
// "stockctl help COMMAND" and "stockctl COMMAND -h" show one command (or a family: "poison") with its
// arguments, the flags it takes and an example.

// printHelp prints the help of topic, the words after "help" or before -h; it returns the exit code: a
// topic that names no command is a usage error.
func printHelp(stdout, stderr io.Writer, set *config.Set, topic []string) int {
	if len(topic) == 0 {
		printUsage(stdout, set)
		return ExitOK
	}
	cmds := helpTopic(topic)
	if len(cmds) == 0 {
		err := usageError(fmt.Sprintf("no command %q: 'stockctl help' lists the commands", strings.Join(topic, " ")))
		printError(stderr, err)
		return exitCode(err)
	}
	for i, c := range cmds {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printCommandUsage(stdout, set, c)
	}
	return ExitOK
}

// helpTopic returns the commands that words name: every command whose name starts with them ("poison":
// poison list and poison replay; "stock": the four stock commands), else the command that a command line
// with these words would run ("order ord-42": order).
func helpTopic(words []string) []*command {
	var family []*command
	for _, c := range commands {
		if name := strings.Fields(c.name); len(name) >= len(words) && slices.Equal(name[:len(words)], words) {
			family = append(family, c)
		}
	}
	if len(family) > 0 {
		return family
	}
	if c, _, err := findCommand(words); err == nil {
		return []*command{c}
	}
	return nil
}

// printCommandUsage shows one command: its arguments, what it does, its own flags and an example.
func printCommandUsage(w io.Writer, set *config.Set, c *command) {
	fmt.Fprintf(w, "Usage: stockctl %s %s [flags]\n\n%s.\n", c.name, c.args, capitalized(c.summary))
	if len(c.flags) > 0 {
		fmt.Fprintf(w, "\nFlags of %s:\n", c.name)
		for _, p := range set.Params() {
			if slices.Contains(c.flags, strings.TrimPrefix(p.Flag, "--")) {
				printParam(w, p, ownUsage(c, p.Usage))
			}
		}
	}
	fmt.Fprintf(w, "\nGlobal flags (stockctl -h describes them): --%s\n", strings.Join(globalFlags, ", --"))
	fmt.Fprintf(w, "\nExample:\n  %s\n", c.example)
}

// ownUsage is a flag's usage without the commands it names first ("poison replay, consumers prune: ..."),
// when c is one of them.
func ownUsage(c *command, usage string) string {
	if before, after, ok := strings.Cut(usage, ": "); ok && strings.Contains(before, strings.Fields(c.name)[0]) {
		return after
	}
	return usage
}

func capitalized(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// printUsage is the help of stockctl -h and stockctl help: every command, every flag, the exit codes.
func printUsage(w io.Writer, set *config.Set) {
	fmt.Fprint(w, "Usage: stockctl [flags] COMMAND [ARGS] [flags]\n\nCommands (stockctl help COMMAND or stockctl COMMAND -h: its flags and an example):\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, "\nFlags (a setting with an env variable reads it; the flag wins):\n")
	for _, p := range set.Params() {
		printParam(w, p, p.Usage)
	}
	fmt.Fprint(w, "  --version\n        print the version and commit of this build, and exit\n")
	fmt.Fprint(w, `
Exit codes:
  0  success
  1  operational failure: Redis unreachable, a script or command error, the timeout
  2  usage error: unknown command, bad argument or setting; nothing was written
  3  not found: unknown SKU, no such poison entry id, stream or group missing
`)
}

// printParam shows one flag, its environment variable and default, and usage.
func printParam(w io.Writer, p config.Param, usage string) {
	fmt.Fprintf(w, "  %s (%sdefault %q)\n        %s\n", strings.TrimSpace(p.Flag+" "+p.Placeholder), envNote(p), p.Default, usage)
}

// envNote names the environment variable of a setting in the usage, "" for a flag-only one.
func envNote(p config.Param) string {
	if p.Env == "" {
		return ""
	}
	return "env " + p.Env + ", "
}
