package stockctl

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stockflow/stockflow/internal/config"
)

// Help is cobra's, with two changes. Flags are shown as every stockflow binary shows them: one line with
// the flag, the name of its value, its environment variable and default, then the usage ("  --redis-url url
// (env REDIS_URL, default ...)"). And help about a command that does not exist is a usage error (exit 2,
// with cobra's suggestions), where cobra's help command prints the usage and exits 0.

const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{flagUsages .LocalFlags}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags (stockctl -h describes them): {{flagNames .InheritedFlags}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} COMMAND -h" for more about a command.{{end}}
`

// exitCodesHelp ends the help of stockctl itself.
const exitCodesHelp = `
Exit codes:
  0  success
  1  operational failure: Redis unreachable, a script or command error, the timeout
  2  usage error: unknown command, bad argument or setting; nothing was written
  3  not found: unknown SKU, no such poison entry id, stream or group missing
  4  nothing done: a replay that replayed nothing (every entry skipped), a prune that deleted nothing`

// templateFuncs adds the template's functions to cobra's (a global map) once.
var templateFuncs sync.Once

// setHelp installs the template and the help command on root.
func setHelp(root *cobra.Command) {
	templateFuncs.Do(func() {
		cobra.AddTemplateFunc("flagUsages", flagUsages)
		cobra.AddTemplateFunc("flagNames", flagNames)
	})
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]",
		Short: "help about a command: its arguments, flags and examples",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			switch {
			case err != nil:
				return usageError(fmt.Sprintf("no command %q: %v", strings.Join(args, " "), err))
			case len(rest) > 0:
				return usageError(fmt.Sprintf("no command %q: 'stockctl help' lists the commands", strings.Join(args, " ")))
			}
			return cmd.Help()
		},
	})
}

// flagUsages lists the flags of fs, one entry each.
func flagUsages(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		p := paramOf(f)
		var notes []string
		if f.Shorthand != "" {
			notes = append(notes, "-"+f.Shorthand)
		}
		if p.Env != "" {
			notes = append(notes, "env "+p.Env)
		}
		if !slices.Contains([]string{"", "0", "0s", "false", "[]"}, p.Default) {
			notes = append(notes, fmt.Sprintf("default %q", p.Default))
		}
		line := strings.TrimSpace(p.Flag + " " + p.Placeholder)
		if len(notes) > 0 {
			line += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(&b, "  %s\n        %s\n", line, p.Usage)
	})
	return strings.TrimSuffix(b.String(), "\n")
}

// Annotations of the flags of settings: what package config says of them.
const (
	annotationEnv         = "stockflow_env"
	annotationPlaceholder = "stockflow_placeholder"
	annotationUsage       = "stockflow_usage"
)

// annotate notes on the flags of fs what set says of its settings, for paramOf.
func annotate(fs *pflag.FlagSet, set *config.Set) {
	for _, p := range set.Params() {
		name := strings.TrimPrefix(p.Flag, "--")
		_ = fs.SetAnnotation(name, annotationEnv, []string{p.Env})
		_ = fs.SetAnnotation(name, annotationPlaceholder, []string{p.Placeholder})
		_ = fs.SetAnnotation(name, annotationUsage, []string{p.Usage})
	}
}

// paramOf describes flag f: a setting's own description (its environment variable, the name of its value;
// annotate), else the flag's, the name of its value back-quoted in its usage.
func paramOf(f *pflag.Flag) config.Param {
	if env, ok := f.Annotations[annotationEnv]; ok {
		return config.Param{Env: env[0], Flag: "--" + f.Name, Default: f.DefValue,
			Usage: f.Annotations[annotationUsage][0], Placeholder: f.Annotations[annotationPlaceholder][0]}
	}
	placeholder, usage := pflag.UnquoteUsage(f)
	if f.Value.Type() == "bool" {
		placeholder = ""
	}
	return config.Param{Flag: "--" + f.Name, Default: f.DefValue, Usage: usage, Placeholder: placeholder}
}

func flagNames(fs *pflag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, "--"+f.Name)
		}
	})
	return strings.Join(names, ", ")
}
