package harness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"
)

// interleave measures every contender once per round, in an order rotated each round (A B C, B C A, ...),
// so none always runs first or right after the same neighbour.
func interleave(rounds, n int, measure func(round, i int) error) error {
	for r := range rounds {
		for k := range n {
			if err := measure(r, (r+k)%n); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockRun is one comparison of lock contenders under the same load shape.
type lockRun struct {
	table      *Table
	contenders []contender
	addrs      []string // the lock servers
	lockers    int      // simulated processes per contender
	perLocker  int      // goroutines per process
	contended  bool     // one key for all, with the counter section; else a key per goroutine
	outside    time.Duration
	maxWait    time.Duration
	duration   time.Duration
	keepWaits  map[string][]time.Duration // when set, every wait by contender (for the plot)
}

// lockColumns are the columns of a lock comparison.
func lockColumns(contended bool) []Column {
	if !contended {
		return []Column{{Key: "ops_per_s", Header: "ops/s", Digits: 0}, {Key: "us_per_op", Header: "µs/op", Digits: 1},
			{Key: "client_cpu_us", Header: "client CPU µs/op", Digits: 1}, {Key: "redis_cpu_us", Header: "Redis CPU µs/op", Digits: 1}}
	}
	return []Column{
		{Key: "sections_per_s", Header: "sections/s", Digits: 0},
		{Key: "p50_wait_ms", Header: "p50 wait ms", Digits: 2},
		{Key: "p99_wait_ms", Header: "p99 wait ms", Digits: 2},
		{Key: "gave_up", Header: "gave up", Digits: 0},
		{Key: "starved", Header: "waits > 0.5s", Digits: 0},
	}
}

// runLocks adds lr's table to the report and measures every contender of lr for b.cfg.Rounds interleaved
// rounds, after a warm-up of each.
func (b *bench) runLocks(ctx context.Context, lr lockRun) error {
	b.addTable(lr.table)
	sets, err := newLockerSets(lr.contenders, lr.addrs, lr.lockers)
	if err != nil {
		return err
	}
	defer closeLockerSets(sets)
	run := lockRunner{b: b, lr: lr, sets: sets}
	if err := run.warmUp(ctx); err != nil {
		return err
	}
	return interleave(b.cfg.Rounds, len(lr.contenders), func(round, i int) error { return run.measure(ctx, round, i) })
}

// lockRunner runs a lockRun: sets[i] are the lockers of contender i.
type lockRunner struct {
	b    *bench
	lr   lockRun
	sets [][]locker
}

// load is the load of contender i in round (-1: the warm-up), with keys of their own: see load.run.
func (r lockRunner) load(i, round int, d time.Duration) load {
	lr := r.lr
	l := load{lockers: r.sets[i], perLocker: lr.perLocker, outside: lr.outside, duration: d, maxWait: lr.maxWait,
		counterKey: fmt.Sprintf("bench:%s:%d:r%d", lr.table.ID, i, round)}
	if lr.contended {
		l.key = fmt.Sprintf("bench-%s-%d-r%d", lr.table.ID, i, round)
		l.counter = r.b.main
	}
	return l
}

// warmUp runs every contender (connections, script cache, subscriptions) outside the measurement.
func (r lockRunner) warmUp(ctx context.Context) error {
	for i := range r.lr.contenders {
		if _, err := r.load(i, -1, r.b.cfg.Warmup).run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// measure runs contender i for one round and records it: the table, the waits, the checks.
func (r lockRunner) measure(ctx context.Context, round, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := r.lr.contenders[i]
	var res loadResult
	cpu, err := r.b.measureCPU(ctx, r.lr.addrs, []int{os.Getpid()}, func() (err error) {
		res, err = r.load(i, round, r.lr.duration).run(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.lr.table.ID, c.name, err)
	}
	slices.Sort(res.Waits)
	r.record(round, c.name, res, r.values(res, cpu))
	r.check(round, c, res)
	return nil
}

// values are the columns of one round: throughput and waits when contended, else throughput and CPU.
func (r lockRunner) values(res loadResult, cpu cpuTime) map[string]float64 {
	perSec := float64(res.Sections) / res.Elapsed.Seconds()
	if r.lr.contended {
		return map[string]float64{"sections_per_s": perSec,
			"p50_wait_ms": percentileMs(res.Waits, 0.50), "p99_wait_ms": percentileMs(res.Waits, 0.99),
			"gave_up": float64(res.GaveUp), "starved": float64(countOver(res.Waits, starved))}
	}
	return map[string]float64{"ops_per_s": perSec, "us_per_op": 1e6 / perSec,
		"client_cpu_us": float64(cpu.procs.Microseconds()) / float64(res.Sections),
		"redis_cpu_us":  float64(cpu.redis.Microseconds()) / float64(res.Sections)}
}

// record prints the round, adds it to the table and keeps its waits for the plot.
func (r lockRunner) record(round int, name string, res loadResult, v map[string]float64) {
	lr := r.lr
	head := fmt.Sprintf("%s round %d/%d %-28s", lr.table.ID, round+1, r.b.cfg.Rounds, name)
	if lr.contended {
		r.b.progress("%s %8.0f sections/s  wait p50 %7.2f ms p99 %8.2f ms  gave up %d",
			head, v["sections_per_s"], v["p50_wait_ms"], v["p99_wait_ms"], res.GaveUp)
	} else {
		r.b.progress("%s %8.0f ops/s  %7.1f µs/op  CPU µs/op: client %.1f, Redis %.1f",
			head, v["ops_per_s"], v["us_per_op"], v["client_cpu_us"], v["redis_cpu_us"])
	}
	lr.table.add(name, v)
	if lr.keepWaits != nil {
		lr.keepWaits[name] = append(lr.keepWaits[name], res.Waits...)
	}
}

// check records the correctness checks of one round: no errors, progress, and under a contended lock an
// exact counter.
func (r lockRunner) check(round int, c contender, res loadResult) {
	lr, checks := r.lr, &r.b.checks
	name := lr.table.ID + " " + c.name
	checks.expect(name+": no errors", res.ErrorCount == 0, "%d errors, e.g. %v", res.ErrorCount, res.Errors)
	checks.expect(name+": made progress", res.Sections > 0, "no section completed in %v", lr.duration)
	if lr.contended && !c.limit {
		checks.expect(name+": counter exact under the lock", res.Counter == int64(res.Sections),
			"round %d: counter %d after %d sections: the lock let two holders in", round+1, res.Counter, res.Sections)
	}
}

// countOver is how many of sorted are over limit.
func countOver(sorted []time.Duration, limit time.Duration) int {
	return len(sorted) - sort.Search(len(sorted), func(k int) bool { return sorted[k] > limit })
}

// uncontended is comparison 1: acquire+release of keys nobody else wants.
func (b *bench) uncontended(ctx context.Context) error {
	for _, par := range []int{1, 32} {
		t := &Table{
			ID:      fmt.Sprintf("uncontended-g%d", par),
			Title:   "1. lock, uncontended acquire+release, " + goroutines(par) + ", one locker",
			Setup:   fmt.Sprintf("each goroutine its own key; %v per contender and round; peers with their defaults", b.cfg.Uncontended),
			Columns: lockColumns(false), RatioOf: "ops_per_s", RatioBase: "stockflow",
		}
		err := b.runLocks(ctx, lockRun{table: t, addrs: []string{b.mainAddr}, lockers: 1, perLocker: par,
			duration:   b.cfg.Uncontended,
			contenders: []contender{stockflowReentrant(), redsyncDefaults(), redislockRetry(0), redissonScripts(), twoEvalSha()}})
		if err != nil {
			return err
		}
	}
	return nil
}

func goroutines(n int) string {
	if n == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", n)
}

// hotKey is comparison 2: one key, 3 lockers x 16 goroutines, a GET/SET counter inside, 0 or 1 ms outside.
func (b *bench) hotKey(ctx context.Context) error {
	for _, outside := range []time.Duration{0, time.Millisecond} {
		ms := fmt.Sprintf("%d ms", outside.Milliseconds())
		t := &Table{
			ID:    fmt.Sprintf("hotkey-%dms", outside.Milliseconds()),
			Title: "2. one hot key, 3 lockers x 16 goroutines, " + ms + " of work outside the lock",
			Setup: fmt.Sprintf("inside: GET+SET of a counter; acquisitions bounded at %v; %v per contender and round",
				hotMaxWait, b.cfg.HotKey),
			Columns: lockColumns(true), RatioOf: "sections_per_s", RatioBase: "stockflow",
		}
		contenders := []contender{stockflowReentrant(), redsyncDefaults(), redislockRetry(time.Millisecond),
			redislockRetry(100 * time.Millisecond), naiveSpin(50 * time.Millisecond)}
		err := b.runLocks(ctx, lockRun{table: t, addrs: []string{b.mainAddr}, lockers: 3, perLocker: 16,
			contended: true, outside: outside, maxWait: hotMaxWait, duration: b.cfg.HotKey,
			keepWaits: b.plotWaits(ms+" outside", contenders), contenders: contenders})
		if err != nil {
			return err
		}
	}
	return nil
}

// plotWaits adds a panel to the plot of lock waits and returns where its waits go, by contender.
func (b *bench) plotWaits(title string, contenders []contender) map[string][]time.Duration {
	ws := waitSet{title: title, waits: map[string][]time.Duration{}}
	for _, c := range contenders {
		ws.order = append(ws.order, c.name)
	}
	b.waits = append(b.waits, ws)
	return ws.waits
}

// starved is the wait past which an acquisition counts as starved in the tables.
const starved = 500 * time.Millisecond

// hotMaxWait bounds each acquisition of the contended runs, as the worker's LOCK_WAIT default.
const hotMaxWait = 5 * time.Second

// redlock is comparison 3: Redlock on 5 independent masters, uncontended and contended.
func (b *bench) redlock(ctx context.Context) error {
	t := &Table{
		ID: "redlock-uncontended", Title: "3a. Redlock on 5 masters, uncontended acquire+release, 1 goroutine",
		Setup:   fmt.Sprintf("%v per contender and round; redsync with its defaults, one goredis pool per master", b.cfg.Redlock),
		Columns: lockColumns(false), RatioOf: "ops_per_s", RatioBase: "stockflow",
	}
	err := b.runLocks(ctx, lockRun{table: t, addrs: b.redlockAddrs, lockers: 1, perLocker: 1,
		duration: b.cfg.Redlock, contenders: []contender{stockflowRedlock(), redsyncDefaults()}})
	if err != nil {
		return err
	}
	t = &Table{
		ID:    "redlock-hotkey",
		Title: "3b. Redlock on 5 masters, one hot key, 3 lockers x 16 goroutines, 1 ms outside",
		Setup: fmt.Sprintf("inside: GET+SET of a counter on a sixth server; acquisitions bounded at %v; %v per contender and round",
			hotMaxWait, b.cfg.Redlock),
		Columns: lockColumns(true), RatioOf: "sections_per_s", RatioBase: "stockflow",
	}
	return b.runLocks(ctx, lockRun{table: t, addrs: b.redlockAddrs, lockers: 3, perLocker: 16, contended: true,
		outside: time.Millisecond, maxWait: hotMaxWait, duration: b.cfg.Redlock,
		contenders: []contender{stockflowRedlock(), redsyncDefaults()}})
}
