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
	"strings"
	"sync"
	"syscall"

	"github.com/stockflow/stockflow/bench/internal/harness"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run returns the exit status: 0 when every check passed, 1 when one failed, 2 when the run broke.
func run(args []string) int {
	cfg, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil { // the flag package has printed why, and the usage
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, err := harness.Run(ctx, cfg)
	return exitStatus(report, err)
}

func parseFlags(args []string) (harness.Config, error) {
	var only map[string]bool
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "the quick configuration (under 3 minutes on 2 cores)")
	rounds := fs.Int("rounds", 0, "rounds (0: 3 quick, 7 full)")
	fs.Func("only", "comma-separated comparisons to run: "+strings.Join(harness.Comparisons, ", ")+" (default all)",
		func(list string) (err error) {
			only, err = harness.ParseOnly(list)
			return err
		})
	out := fs.String("out", "results/latest", "directory for <mode>.json and <mode>-lock-waits.png; "+
		"scripts/bench.sh --record writes the committed ones in results")
	workerBin := fs.String("worker-bin", "", "the bench worker binary (bench/cmd/benchworker) for the end-to-end comparison; empty skips it")
	consumerBin := fs.String("consumer-bin", "", "the peers of the cost comparison (bench/cmd/benchconsumer); empty skips it")
	baseWorkerBin := fs.String("base-worker", "", "another build of the bench worker, run as one more contender of the cost comparison (scripts/bench.sh --base builds it)")
	costOrders := fs.Int("cost-orders", 0, "orders per round of the cost comparison (0: the mode's)")
	profile := fs.String("profile", "", "write a CPU profile of each consumer process of every cost round to this directory "+
		"(<workload>-<contender>-<round>-<process>.pprof), taken over the first --profile-seconds of its drain")
	profileSeconds := fs.Int("profile-seconds", 2, "how long each profile of --profile runs")
	commit := fs.String("commit", "", "the commit measured, for the report")
	pidFile := fs.String("pid-file", "", "append the pid of every child process and a part of its command line here (the script kills them if the harness dies)")
	if err := fs.Parse(args); err != nil {
		return harness.Config{}, err
	}
	cfg := harness.Full()
	if *quick {
		cfg = harness.Quick()
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	cfg.Only, cfg.Out, cfg.WorkerBin, cfg.ConsumerBin, cfg.Commit = only, *out, *workerBin, *consumerBin, *commit
	cfg.BaseWorkerBin = *baseWorkerBin
	if *costOrders > 0 {
		cfg.CostOrders = *costOrders
	}
	cfg.ProfileDir, cfg.ProfileSeconds = *profile, *profileSeconds
	cfg.Progress, cfg.OnPid = os.Stderr, pidRecorder(*pidFile)
	return cfg, nil
}

// pidRecorder appends a line "pid cmdline" to path for every child process; no path, no recorder.
func pidRecorder(path string) func(pid int, cmdline string) {
	if path == "" {
		return nil
	}
	var mu sync.Mutex
	return func(pid int, cmdline string) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintln(f, pid, cmdline)
			f.Close()
		}
	}
}

// exitStatus prints the report, what there is of it, and says how the run ended.
func exitStatus(report *harness.Report, err error) int {
	if report != nil {
		report.Print(os.Stdout)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	case len(report.Problems) > 0:
		return 1
	}
	return 0
}
