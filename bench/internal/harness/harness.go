// Package harness runs stockflow's side-by-side benchmarks against its peers (go-redsync/redsync,
// bsm/redislock, a naive SETNX lock, naive and optimistic stock updates) on redis-servers it starts
// itself, with the contenders interleaved round by round, and checks every contender's correctness in the
// same runs.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// Comparisons are the names Config.Only accepts, in the order they run.
var Comparisons = []string{"uncontended", "hotkey", "redlock", "stock", "e2e", "scale", "lines", "cost", "pubsub"}

// Config sizes a run.
type Config struct {
	Mode        string        // quick or full: names the result files
	Commit      string        // the code measured, for the report
	Rounds      int           // rounds of every comparison, contenders interleaved within each
	Warmup      time.Duration // per lock contender, before the rounds
	Uncontended time.Duration // per contender and round
	HotKey      time.Duration
	Redlock     time.Duration
	// Stock strategies: StockOrders orders of one unit against StockUnits, from StockClients goroutines.
	StockUnits, StockOrders, StockClients int
	// End to end: orders per round for the uniform and the hot-SKU workload.
	E2EOrders, E2EHotOrders int
	CostOrders              int // cost of an order: orders per round
	// ProfileDir, when set, receives a CPU profile of each consumer process of every cost round, taken
	// over the first ProfileSeconds of its drain (give the round enough orders to last that long).
	ProfileDir     string
	ProfileSeconds int
	WorkerBin      string // the bench worker binary; "" skips the end-to-end comparison
	ConsumerBin    string // the peers of the cost comparison (bench/cmd/benchconsumer); "" skips it
	// Pub/Sub: messages drained per contender and round; how long the idle subscriptions are measured.
	PubSubMessages int
	PubSubIdle     time.Duration
	// BaseWorkerBin is another build of the bench worker, run as one more contender of the cost comparison
	// ("base worker"): an A/B of two builds in the same rounds. "": none.
	BaseWorkerBin string
	Out           string          // results directory; "": write nothing
	Only          map[string]bool // comparisons to run; empty: all
	Progress      io.Writer       // a line per measurement; nil: none
	// OnPid is told every child process started (redis-servers, workers) and a string its command line
	// holds, so a pid reused by another process is never taken for it.
	OnPid func(pid int, cmdline string)
}

// Quick is the configuration of `bench.sh --quick`: under 3 minutes on 2 cores.
func Quick() Config {
	return Config{Mode: "quick", Rounds: 3, Warmup: 200 * time.Millisecond, Uncontended: 600 * time.Millisecond,
		HotKey: 1200 * time.Millisecond, Redlock: 800 * time.Millisecond,
		StockUnits: 5000, StockOrders: 6000, StockClients: 64, E2EOrders: 12000, E2EHotOrders: 5000, CostOrders: 20000,
		PubSubMessages: 20000, PubSubIdle: idleWindow}
}

// Full is the configuration of `bench.sh`: about 9 minutes. More, shorter rounds rather than fewer long
// ones: the medians of pairs that ran seconds apart resist a machine whose load drifts.
func Full() Config {
	return Config{Mode: "full", Rounds: 7, Warmup: 500 * time.Millisecond, Uncontended: 1500 * time.Millisecond,
		HotKey: 2500 * time.Millisecond, Redlock: 1500 * time.Millisecond,
		StockUnits: 5000, StockOrders: 6000, StockClients: 64, E2EOrders: 20000, E2EHotOrders: 8000, CostOrders: 20000,
		PubSubMessages: 50000, PubSubIdle: idleWindow}
}

// ParseOnly reads a comma-separated list of comparisons into a Config.Only; "" is all of them.
func ParseOnly(list string) (map[string]bool, error) {
	if list == "" {
		return nil, nil
	}
	only := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		if !slices.Contains(Comparisons, name) {
			return nil, fmt.Errorf("unknown comparison %q; want one of %s", name, strings.Join(Comparisons, ", "))
		}
		only[name] = true
	}
	return only, nil
}

// resultName names the result files: the mode, and for a run of some comparisons only, those, so it never
// replaces the results of a whole run (quick-hotkey-stock).
func (c Config) resultName() string {
	name := c.Mode
	for _, comparison := range Comparisons {
		if c.Only[comparison] {
			name += "-" + comparison
		}
	}
	return name
}

// selected is the comparisons the run makes, in order.
func (c Config) selected() []string {
	if len(c.Only) == 0 {
		return Comparisons
	}
	return slices.DeleteFunc(slices.Clone(Comparisons), func(name string) bool { return !c.Only[name] })
}

// bench is one run: its servers, and what it measured so far.
type bench struct {
	cfg          Config
	started      time.Time
	tmp          string // the workers' logs
	servers      []*redisproc.Server
	mainAddr     string // everything but Redlock
	main         *redis.Client
	redlockAddrs []string
	infoClients  map[string]*redis.Client // for INFO cpu, by address
	report       *Report
	checks       checks
	waits        []waitSet // for the plot
	// groupLooks counts the harness's own XINFO GROUPS (group), which the Pub/Sub's counts leave out.
	groupLooks atomic.Int64
}

// Run runs the comparisons and writes <Out>/<Mode>.json and <Out>/<Mode>-lock-waits.png (a run of some
// comparisons only: <Mode>-<comparison>...). A failed correctness check is in Report.Problems, not an
// error; an error means the run itself broke.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	b, err := newBench(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer b.close()
	if err := b.runComparisons(ctx); err != nil {
		return b.report, err
	}
	b.finish()
	return b.report, b.write()
}

// newBench starts the servers: one for everything but Redlock, five Redlock masters.
func newBench(ctx context.Context, cfg Config) (*bench, error) {
	started := time.Now()
	tmp, err := os.MkdirTemp("", "stockflow-bench-")
	if err != nil {
		return nil, err
	}
	servers, err := startServers(6, cfg)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	b := &bench{cfg: cfg, started: started, tmp: tmp, servers: servers, mainAddr: servers[0].Addr,
		main: newClient(servers[0].Addr), redlockAddrs: addrsOf(servers[1:]), infoClients: map[string]*redis.Client{}}
	b.report = &Report{Mode: cfg.Mode, Commit: cfg.Commit, Started: started.UTC(), Rounds: cfg.Rounds,
		Machine: machine(ctx, b.main)}
	return b, nil
}

func (b *bench) close() {
	closeAll(slices.Collect(maps.Values(b.infoClients)))
	_ = b.main.Close()
	stopServers(b.servers)
	_ = os.RemoveAll(b.tmp)
}

func (b *bench) runComparisons(ctx context.Context) error {
	steps := map[string]func(context.Context) error{
		"uncontended": b.uncontended, "hotkey": b.hotKey, "redlock": b.redlock, "stock": b.stock, "e2e": b.endToEnd,
		"scale": b.scale, "lines": b.lines, "cost": b.cost, "pubsub": b.pubSub,
	}
	for _, name := range b.cfg.selected() {
		if err := steps[name](ctx); err != nil {
			return err
		}
	}
	return nil
}

// finish judges the run: the targets on the medians, the checks over every round.
func (b *bench) finish() {
	r := b.report
	r.Machine.LoadEnd = loadAvg()
	r.Targets = r.judgeTargets()
	r.Checks = b.checks.list
	r.Problems = b.checks.problems()
	r.Seconds = time.Since(b.started).Seconds()
}

// addTable adds a comparison's table to the report.
func (b *bench) addTable(t *Table) *Table {
	b.report.Tables = append(b.report.Tables, t)
	return t
}

// write writes the report as JSON and the plot of the lock waits.
func (b *bench) write() error {
	if b.cfg.Out == "" {
		return nil
	}
	if err := os.MkdirAll(b.cfg.Out, 0o755); err != nil {
		return err
	}
	base := filepath.Join(b.cfg.Out, b.cfg.resultName())
	if err := writeJSON(base+".json", b.report); err != nil {
		return err
	}
	if err := writePlot(base+"-lock-waits.png", b.waits); err != nil {
		return err
	}
	b.progress("results: %s.json (and %s-lock-waits.png when comparison 2 ran)", base, base)
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func (b *bench) progress(format string, args ...any) {
	if b.cfg.Progress != nil {
		fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
	}
}
