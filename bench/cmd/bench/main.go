// Command bench runs stockflow's comparisons against its peers and prints a table of medians; it exits 1
// when a correctness check failed. scripts/bench.sh builds and runs it: see bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/stockflow/stockflow/bench/internal/harness"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "the quick configuration (under 3 minutes on 2 cores)")
	rounds := fs.Int("rounds", 0, "rounds (0: 3 quick, 5 full)")
	only := fs.String("only", "", "comma-separated comparisons to run: "+strings.Join(harness.Comparisons, ", ")+" (default all)")
	out := fs.String("out", "results", "directory for <mode>.json and <mode>-lock-waits.png")
	workerBin := fs.String("worker-bin", "", "the bench worker binary (bench/cmd/benchworker) for the end-to-end comparison; empty skips it")
	commit := fs.String("commit", "", "the commit measured, for the report")
	pidFile := fs.String("pid-file", "", "append the pid of every child process and a part of its command line here (the script kills them if the harness dies)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := harness.Full()
	if *quick {
		cfg = harness.Quick()
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	cfg.Out, cfg.WorkerBin, cfg.Progress, cfg.Commit = *out, *workerBin, os.Stderr, *commit
	if *only != "" {
		cfg.Only = map[string]bool{}
		for _, name := range strings.Split(*only, ",") {
			if !contains(harness.Comparisons, name) {
				fmt.Fprintf(os.Stderr, "bench: unknown comparison %q; want one of %s\n", name, strings.Join(harness.Comparisons, ", "))
				return 2
			}
			cfg.Only[name] = true
		}
	}
	if *pidFile != "" {
		var mu sync.Mutex
		cfg.OnPid = func(pid int, cmdline string) {
			mu.Lock()
			defer mu.Unlock()
			f, err := os.OpenFile(*pidFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err == nil {
				fmt.Fprintln(f, strconv.Itoa(pid), cmdline)
				f.Close()
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, err := harness.Run(ctx, cfg)
	if report != nil {
		report.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if len(report.Problems) > 0 {
		return 1
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
