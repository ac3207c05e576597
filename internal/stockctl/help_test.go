package stockctl_test

import (
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
)

// "stockctl help COMMAND" and "stockctl COMMAND -h" show that command alone: its arguments, the flags it
// takes (and not those of other commands) and an example; a family ("poison") lists its commands.
func TestHelpOfOneCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     [][]string
		want     []string
		dontWant []string
	}{
		{name: "poison replay", args: [][]string{{"help", "poison", "replay"}, {"poison", "replay", "-h"}, {"poison", "replay", "--all", "--help"}},
			want: []string{"stockctl poison replay (--id ID", "Flags:", "  --reason-contains text\n", "  --dry-run\n",
				"Global flags", "--redis-url", "--outcome-ttl", "Examples:\n  stockctl poison replay --reason-contains"},
			dontWant: []string{"  --limit n", "  --sku", "Exit codes:"}},
		{name: "order, with its arguments before -h", args: [][]string{{"order", "ord-42", "-h"}, {"help", "order"}},
			want:     []string{"stockctl order ORDER_ID --sku SKU", "  --sku SKU\n", "Examples:\n  stockctl order ord-42 --sku SKU-1"},
			dontWant: []string{"  --id id", "Exit codes:"}},
		{name: "a command without flags of its own", args: [][]string{{"lock", "-h"}},
			want: []string{"stockctl lock SKU [flags]", "Global flags", "Examples:\n  stockctl lock SKU-1"}, dontWant: []string{"--limit"}},
		{name: "a family", args: [][]string{{"help", "poison"}, {"poison", "-h"}},
			want: []string{"stockctl poison COMMAND", "  list ", "  replay ", "  --limit n (default \"50\")"}, dontWant: []string{"pending"}},
		{name: "the stock commands", args: [][]string{{"help", "stock"}},
			want: []string{"stockctl stock [SKU...]", "  add ", "  get ", "  set ", "  --limit n"}},
	}
	for _, c := range cases {
		for _, args := range c.args {
			r := runArgs(t, args...)
			wantCode(t, r, stockctl.ExitOK)
			wantContains(t, strings.Join(args, " "), r.stdout, c.want...)
			for _, no := range c.dontWant {
				if strings.Contains(r.stdout, no) {
					t.Errorf("%q (%s) shows %q:\n%s", args, c.name, no, r.stdout)
				}
			}
		}
	}
}

// Help about a command that does not exist, and an unknown command, exit 2 with a message naming it, a
// suggestion when one is close, and nothing on standard output.
func TestHelpOfAnUnknownCommandExits2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"help", "stocks"}, "no command \"stocks\": unknown command \"stocks\" for \"stockctl\"\n\nDid you mean this?\n\tstock"},
		{[]string{"frobnicate", "-h"}, `unknown command "frobnicate"`},
		{[]string{"help", "poison", "purge"}, `no command "poison purge"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stok", "SKU-1"}, "unknown command \"stok\" for \"stockctl\"\n\nDid you mean this?\n\tstock"},
		{[]string{"poison", "relpay"}, "unknown command \"relpay\" for \"stockctl poison\"\n\nDid you mean this?\n\treplay"},
		{[]string{"consumers", "prnue"}, "Did you mean this?\n\tprune"},
	} {
		r := runArgs(t, c.args...)
		wantCode(t, r, stockctl.ExitUsage)
		wantContains(t, strings.Join(c.args, " "), r.stderr, c.says, "stockctl refused its settings or arguments (stockctl -h lists them)")
		if r.stdout != "" {
			t.Errorf("%q printed %q on stdout", c.args, r.stdout)
		}
	}
}
