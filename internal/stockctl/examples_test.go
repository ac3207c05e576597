package stockctl

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Every command has an example, as help shows it, that runs against a Redis without a usage error: an
// example that no longer parses would teach a wrong command.
func TestEveryCommandHasAnExampleThatRuns(t *testing.T) {
	url := redistest.Start(t).URL()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Hidden || !c.Runnable() || c.Name() == "help" || c.HasParent() && c.Parent().Name() == "completion" ||
			c.Name() == "completion" || !c.HasParent() {
			return
		}
		words := shellWords(strings.TrimSpace(c.Example))
		if len(words) < 2 || words[0] != "stockctl" {
			t.Errorf("%s: example %q does not start with stockctl", c.CommandPath(), c.Example)
			return
		}
		var out, errOut bytes.Buffer
		log := config.Logger(&errOut, slog.LevelInfo)
		if code := Run(context.Background(), append(words[1:], "--redis-url", url), &out, log); code == ExitUsage {
			t.Errorf("%s: example %q exits %d: %s", c.CommandPath(), c.Example, code, errOut.String())
		}
		if found, _, _ := c.Root().Find(words[1:]); found != c {
			t.Errorf("%s: example %q runs %s", c.CommandPath(), c.Example, found.CommandPath())
		}
	}
	walk(newRoot(&options{}, nil))
}

// shellWords splits a command line as sh does, for the single quotes the examples use.
func shellWords(line string) []string {
	var words []string
	for i, part := range strings.Split(line, "'") {
		if i%2 == 1 {
			words = append(words, part)
			continue
		}
		words = append(words, strings.Fields(part)...)
	}
	return words
}
