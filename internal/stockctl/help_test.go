package stockctl_test

import (
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
)

// "stockctl help COMMAND" and "stockctl COMMAND -h" show that command alone: its arguments, the flags it
// takes (and not those of other commands) and an example; a family ("poison") shows each of its commands.
func TestHelpOfOneCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     [][]string
		want     []string
		dontWant []string
	}{
		{name: "poison replay", args: [][]string{{"help", "poison", "replay"}, {"poison", "replay", "-h"}, {"poison", "replay", "--all", "--help"}},
			want: []string{"Usage: stockctl poison replay (--id ID", "Flags of poison replay:", "  --reason-contains text (", "  --dry-run (",
				"  --outcome-ttl duration (env OUTCOME_TTL", "Global flags", "--redis-url", "Example:\n  stockctl poison replay --reason-contains"},
			dontWant: []string{"  --limit n (", "  --sku", "Usage: stockctl poison list", "Exit codes:"}},
		{name: "order, with its arguments before -h", args: [][]string{{"order", "ord-42", "-h"}, {"help", "order"}},
			want:     []string{"Usage: stockctl order ORDER_ID --sku SKU", "  --sku SKU (", "Example:\n  stockctl order ord-42 --sku SKU-1"},
			dontWant: []string{"  --id id", "Usage: stockctl lock"}},
		{name: "a command without flags of its own", args: [][]string{{"lock", "-h"}},
			want: []string{"Usage: stockctl lock SKU [flags]", "Global flags", "Example:\n  stockctl lock SKU-1"}, dontWant: []string{"Flags of lock"}},
		{name: "a family", args: [][]string{{"help", "poison"}, {"poison", "-h"}},
			want: []string{"Usage: stockctl poison list", "Usage: stockctl poison replay"}, dontWant: []string{"Usage: stockctl pending"}},
		{name: "the stock commands", args: [][]string{{"help", "stock"}},
			want: []string{"Usage: stockctl stock SKU...", "Usage: stockctl stock set SKU N", "Usage: stockctl stock add SKU N", "Usage: stockctl stock get SKU..."}},
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

// Help about a command that does not exist, and an unknown command, exit 2 with a message naming it and
// nothing on standard output.
func TestHelpOfAnUnknownCommandExits2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"help", "stocks"}, `no command "stocks": 'stockctl help' lists the commands`},
		{[]string{"frobnicate", "-h"}, `no command "frobnicate"`},
		{[]string{"help", "poison", "purge"}, `no command "poison purge"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		r := runArgs(t, c.args...)
		wantCode(t, r, stockctl.ExitUsage)
		wantContains(t, strings.Join(c.args, " "), r.stderr, c.says, "Run 'stockctl -h' for usage.")
		if r.stdout != "" {
			t.Errorf("%q printed %q on stdout", c.args, r.stdout)
		}
	}
}
