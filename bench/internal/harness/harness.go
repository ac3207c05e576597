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
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Comparisons are the names Config.Only accepts, in the order they run.
var Comparisons = []string{"uncontended", "hotkey", "redlock", "stock", "e2e"}

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
	WorkerBin               string          // the bench worker binary; "" skips the end-to-end comparison
	Out                     string          // results directory
	Only                    map[string]bool // comparisons to run; empty: all
	Progress                io.Writer       // a line per measurement; nil: none
	// OnPid is told every child process started (redis-servers, workers) and a string its command line
	// holds, so a pid reused by another process is never taken for it.
	OnPid func(pid int, cmdline string)
}

// Quick is the configuration of `bench.sh --quick`: under 3 minutes on 2 cores.
func Quick() Config {
	return Config{Mode: "quick", Rounds: 3, Warmup: 200 * time.Millisecond, Uncontended: 600 * time.Millisecond,
		HotKey: 1200 * time.Millisecond, Redlock: 800 * time.Millisecond,
		StockUnits: 5000, StockOrders: 6000, StockClients: 64, E2EOrders: 12000, E2EHotOrders: 5000}
}

// Full is the configuration of `bench.sh`: about 9 minutes. More, shorter rounds rather than fewer long
// ones: the medians of pairs that ran seconds apart resist a machine whose load drifts.
func Full() Config {
	return Config{Mode: "full", Rounds: 7, Warmup: 500 * time.Millisecond, Uncontended: 1500 * time.Millisecond,
		HotKey: 2500 * time.Millisecond, Redlock: 1500 * time.Millisecond,
		StockUnits: 5000, StockOrders: 6000, StockClients: 64, E2EOrders: 20000, E2EHotOrders: 8000}
}

type bench struct {
	cfg          Config
	tmp          string
	mainAddr     string
	main         *redis.Client
	redlockAddrs []string
	report       *Report
	checks       checks
	waits        []waitSet
	infoClients  map[string]*redis.Client // for INFO cpu, by address
}

// Run runs the comparisons and writes <Out>/<Mode>.json and <Out>/<Mode>-lock-waits.png (a run of some
// comparisons only: <Mode>-<comparison>...). A failed
// correctness check is in Report.Problems, not an error; an error means the run itself broke.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	started := time.Now()
	tmp, err := os.MkdirTemp("", "stockflow-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	servers, err := startServers(6, cfg.OnPid) // one for everything but Redlock, five Redlock masters
	if err != nil {
		return nil, err
	}
	defer stopServers(servers)
	b := &bench{cfg: cfg, tmp: tmp, mainAddr: servers[0].Addr, main: newClient(servers[0].Addr),
		report: &Report{Mode: cfg.Mode, Commit: cfg.Commit, Started: started.UTC(), Rounds: cfg.Rounds}}
	defer b.main.Close()
	b.infoClients = map[string]*redis.Client{}
	defer func() {
		for _, c := range b.infoClients {
			_ = c.Close()
		}
	}()
	for _, s := range servers[1:] {
		b.redlockAddrs = append(b.redlockAddrs, s.Addr)
	}
	b.report.Machine = machine(ctx, b.main)
	steps := map[string]func(context.Context) error{
		"uncontended": b.uncontended, "hotkey": b.hotKey, "redlock": b.redlock, "stock": b.stock, "e2e": b.endToEnd,
	}
	for _, name := range Comparisons {
		if len(cfg.Only) > 0 && !cfg.Only[name] {
			continue
		}
		if err := steps[name](ctx); err != nil {
			return b.report, err
		}
	}
	b.report.Machine.LoadEnd = loadAvg()
	b.report.Targets = b.targets()
	b.report.Checks = b.checks.list
	for _, c := range b.checks.list {
		if c.Failed > 0 {
			b.report.Problems = append(b.report.Problems, fmt.Sprintf("%s: failed %d of %d runs: %s", c.Name, c.Failed, c.Runs, c.Detail))
		}
	}
	b.report.Seconds = time.Since(started).Seconds()
	return b.report, b.write()
}

func (b *bench) write() error {
	if b.cfg.Out == "" {
		return nil
	}
	if err := os.MkdirAll(b.cfg.Out, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(b.report, "", "  ")
	if err != nil {
		return err
	}
	// A partial run is named after its comparisons, so it never replaces a whole run's results.
	name := b.cfg.Mode
	for _, c := range Comparisons {
		if b.cfg.Only[c] {
			name += "-" + c
		}
	}
	if err := os.WriteFile(filepath.Join(b.cfg.Out, name+".json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return writePlot(filepath.Join(b.cfg.Out, name+"-lock-waits.png"), b.waits)
}

func (b *bench) progress(format string, args ...any) {
	if b.cfg.Progress != nil {
		fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
	}
}

// Machine is what the numbers were measured on.
type Machine struct {
	CPU   string `json:"cpu"`
	Cores int    `json:"cores"`
	// Load is /proc/loadavg at the start and the end of the run: anything else running skews the numbers.
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Redis     string `json:"redis"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%d x %s, Linux %s, %s, redis %s; load average %s at the start, %s at the end", m.Cores, m.CPU,
		m.Kernel, m.Go, m.Redis, m.LoadStart, m.LoadEnd)
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

func machine(ctx context.Context, rdb *redis.Client) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.LoadStart = loadAvg()
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				m.Redis = v
			}
		}
	}
	return m
}

// targets judges the medians against the acceptance targets of issue 8.
func (b *bench) targets() []Target {
	var out []Target
	table := func(id string) *Table {
		i := slices.IndexFunc(b.report.Tables, func(t *Table) bool { return t.ID == id })
		if i < 0 {
			return nil
		}
		return b.report.Tables[i]
	}
	add := func(tg Target, got float64, met func(float64) bool) {
		if math.IsNaN(got) || math.IsInf(got, 0) {
			tg.Detail = "not measured; " + tg.Detail
			got = 0
		}
		tg.Got, tg.Met = got, met(got)
		out = append(out, tg)
	}
	ratio := func(name, id, key, of, base string, want float64) {
		if t := table(id); t != nil {
			add(Target{Name: name, Want: fmt.Sprintf(">= %.2fx", want), Unit: "x",
				Detail: fmt.Sprintf("%s vs %s; by round %s", format(t.value(of, key), 0), format(t.value(base, key), 0),
					t.pairedRatios(of, base, key))},
				t.value(of, key)/t.value(base, key), func(got float64) bool { return got >= want })
		}
	}
	for _, g := range []struct{ id, label string }{{"1", "1 goroutine"}, {"32", "32 goroutines"}} {
		id := "uncontended-g" + g.id
		ratio("uncontended, "+g.label+", vs redislock", id, "ops_per_s", "stockflow", "redislock", 1.0)
		ratio("uncontended, "+g.label+", vs physical limit", id, "ops_per_s", "stockflow", "physical limit (2 x EVALSHA)", 0.85)
	}
	hot := "hotkey-1ms"
	ratio("hot key, 1 ms outside, vs redsync defaults", hot, "sections_per_s", "stockflow", "redsync", 4)
	ratio("hot key, 1 ms outside, vs redislock 1 ms", hot, "sections_per_s", "stockflow", "redislock 1ms", 3)
	if t := table(hot); t != nil {
		add(Target{Name: "hot key, 1 ms outside, stockflow p99 wait", Want: "<= 50 ms", Unit: " ms"},
			t.value("stockflow", "p99_wait_ms"), func(got float64) bool { return got <= 50 })
	}
	ratio("Redlock uncontended vs redsync", "redlock-uncontended", "ops_per_s", "stockflow", "redsync", 1.0)
	ratio("Redlock hot key vs redsync", "redlock-hotkey", "sections_per_s", "stockflow", "redsync", 1.0)
	ratio("end to end uniform: lock on vs off", "e2e-uniform", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.7)
	ratio("end to end hot SKU: lock on vs off", "e2e-hot", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.7)
	rss := 0.0
	for _, id := range []string{"e2e-uniform", "e2e-hot"} {
		if t := table(id); t != nil {
			rss = max(rss, t.value(e2eModes[0].name, "rss_mib"))
		}
	}
	if rss > 0 {
		out = append(out, Target{Name: "worker peak RSS, lock on", Want: "<= 64 MiB", Got: rss, Unit: " MiB", Met: rss <= 64})
	}
	return out
}
