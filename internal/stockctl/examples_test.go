package stockctl

import (
	"flag"
	"strings"
	"testing"
)

// Every command's example, as help shows it, is a command line that selects that command with flags it
// takes and values that pass the checks: an example that no longer parses would teach a wrong command.
func TestEveryCommandHasAnExampleThatParses(t *testing.T) {
	for _, c := range commands {
		words := shellWords(c.example)
		if len(words) < 2 || words[0] != "stockctl" {
			t.Errorf("%s: example %q does not start with stockctl", c.name, c.example)
			continue
		}
		o := &options{given: map[string]bool{}}
		set := newFlagSet(o)
		rest, err := splitArgs(set, words[1:])
		if err != nil {
			t.Errorf("%s: example %q: %v", c.name, c.example, err)
			continue
		}
		set.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
		got, args, err := findCommand(rest)
		switch {
		case err != nil || got != c:
			t.Errorf("%s: example %q runs %v (%v)", c.name, c.example, got, err)
		case checkFlags(c, o) != nil:
			t.Errorf("%s: example %q: %v", c.name, c.example, checkFlags(c, o))
		case c.noArgs && len(args) > 0, !c.noArgs && len(args) == 0:
			t.Errorf("%s: example %q gives it the arguments %q", c.name, c.example, args)
		}
	}
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
