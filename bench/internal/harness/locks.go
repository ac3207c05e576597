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
	table       *Table
	contenders  []contender
	addrs       []string // the lock servers
	lockers     int      // simulated processes per contender
	perLocker   int      // goroutines per process
	contended   bool     // one key for all, with the counter section; else a key per goroutine
	outside     time.Duration
	maxWait     time.Duration
	duration    time.Duration
	keepWaits   map[string][]time.Duration // when set, every wait by contender (for the plot)
	checkPrefix string
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

func (b *bench) runLocks(ctx context.Context, lr lockRun) error {
	sets := make([][]locker, len(lr.contenders))
	defer func() {
		for _, s := range sets {
			closeLockers(s)
		}
	}()
	for i, c := range lr.contenders {
		ls, err := newLockers(c, lr.addrs, lr.lockers)
		if err != nil {
			return err
		}
		sets[i] = ls
	}
	// Keys of their own for every contender and round: see load.run.
	loadOf := func(i, round int, d time.Duration) load {
		l := load{lockers: sets[i], perLocker: lr.perLocker, outside: lr.outside, duration: d, maxWait: lr.maxWait,
			counterKey: fmt.Sprintf("bench:%s:%d:r%d", lr.table.ID, i, round)}
		if lr.contended {
			l.key = fmt.Sprintf("bench-%s-%d-r%d", lr.table.ID, i, round)
			l.counter = b.main
		}
		return l
	}
	// Warm up every contender (connections, script cache, subscriptions) outside the measurement.
	for i := range lr.contenders {
		if _, err := loadOf(i, -1, b.cfg.Warmup).run(ctx); err != nil {
			return err
		}
	}
	rounds := b.cfg.Rounds
	return interleave(rounds, len(lr.contenders), func(round, i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := lr.contenders[i]
		redis0, err := b.redisCPU(ctx, lr.addrs...)
		if err != nil {
			return err
		}
		client0 := processCPU(os.Getpid())
		res, err := loadOf(i, round, lr.duration).run(ctx)
		if err != nil {
			return fmt.Errorf("%s %s: %w", lr.table.ID, c.name, err)
		}
		clientCPU := processCPU(os.Getpid()) - client0
		redis1, err := b.redisCPU(ctx, lr.addrs...)
		if err != nil {
			return err
		}
		redisCPU := redis1 - redis0
		slices.Sort(res.Waits)
		perSec := float64(res.Sections) / res.Elapsed.Seconds()
		values := map[string]float64{}
		if lr.contended {
			values["sections_per_s"] = perSec
			values["p50_wait_ms"] = percentileMs(res.Waits, 0.50)
			values["p99_wait_ms"] = percentileMs(res.Waits, 0.99)
			values["gave_up"] = float64(res.GaveUp)
			values["starved"] = float64(len(res.Waits) - sort.Search(len(res.Waits), func(k int) bool { return res.Waits[k] > starved }))
			b.progress("%s round %d/%d %-28s %8.0f sections/s  wait p50 %7.2f ms p99 %8.2f ms  gave up %d",
				lr.table.ID, round+1, rounds, c.name, perSec, values["p50_wait_ms"], values["p99_wait_ms"], res.GaveUp)
		} else {
			values["ops_per_s"] = perSec
			values["us_per_op"] = 1e6 / perSec
			values["client_cpu_us"] = float64(clientCPU.Microseconds()) / float64(res.Sections)
			values["redis_cpu_us"] = float64(redisCPU.Microseconds()) / float64(res.Sections)
			b.progress("%s round %d/%d %-28s %8.0f ops/s  %7.1f µs/op  CPU µs/op: client %.1f, Redis %.1f", lr.table.ID,
				round+1, rounds, c.name, perSec, 1e6/perSec, values["client_cpu_us"], values["redis_cpu_us"])
		}
		lr.table.add(c.name, values)
		if lr.keepWaits != nil {
			lr.keepWaits[c.name] = append(lr.keepWaits[c.name], res.Waits...)
		}
		name := lr.checkPrefix + c.name
		b.checks.expect(name+": no errors", res.ErrorCount == 0, "%d errors, e.g. %v", res.ErrorCount, res.Errors)
		b.checks.expect(name+": made progress", res.Sections > 0, "no section completed in %v", lr.duration)
		if lr.contended && !c.limit {
			b.checks.expect(name+": counter exact under the lock", res.Counter == int64(res.Sections),
				"round %d: counter %d after %d sections: the lock let two holders in", round+1, res.Counter, res.Sections)
		}
		return nil
	})
}

// uncontended is comparison 1: acquire+release of keys nobody else wants.
func (b *bench) uncontended(ctx context.Context) error {
	for _, par := range []int{1, 32} {
		goroutines := "1 goroutine"
		if par > 1 {
			goroutines = fmt.Sprintf("%d goroutines", par)
		}
		t := &Table{
			ID:      fmt.Sprintf("uncontended-g%d", par),
			Title:   "1. lock, uncontended acquire+release, " + goroutines + ", one locker",
			Setup:   fmt.Sprintf("each goroutine its own key; %v per contender and round; peers with their defaults", b.cfg.Uncontended),
			Columns: lockColumns(false), RatioOf: "ops_per_s", RatioBase: "stockflow",
		}
		b.report.Tables = append(b.report.Tables, t)
		err := b.runLocks(ctx, lockRun{table: t, addrs: []string{b.mainAddr}, lockers: 1, perLocker: par,
			duration: b.cfg.Uncontended, checkPrefix: t.ID + " ",
			contenders: []contender{stockflowReentrant(), redsyncDefaults(), redislockRetry(0), twoEvalSha()}})
		if err != nil {
			return err
		}
	}
	return nil
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
		b.report.Tables = append(b.report.Tables, t)
		contenders := []contender{stockflowReentrant(), redsyncDefaults(), redislockRetry(time.Millisecond),
			redislockRetry(100 * time.Millisecond), naiveSpin(50 * time.Millisecond)}
		ws := waitSet{title: ms + " outside", waits: map[string][]time.Duration{}}
		for _, c := range contenders {
			ws.order = append(ws.order, c.name)
		}
		b.waits = append(b.waits, ws)
		err := b.runLocks(ctx, lockRun{table: t, addrs: []string{b.mainAddr}, lockers: 3, perLocker: 16,
			contended: true, outside: outside, maxWait: hotMaxWait, duration: b.cfg.HotKey, keepWaits: ws.waits,
			checkPrefix: t.ID + " ", contenders: contenders})
		if err != nil {
			return err
		}
	}
	return nil
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
	b.report.Tables = append(b.report.Tables, t)
	err := b.runLocks(ctx, lockRun{table: t, addrs: b.redlockAddrs, lockers: 1, perLocker: 1,
		duration: b.cfg.Redlock, checkPrefix: t.ID + " ", contenders: []contender{stockflowRedlock(), redsyncDefaults()}})
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
	b.report.Tables = append(b.report.Tables, t)
	return b.runLocks(ctx, lockRun{table: t, addrs: b.redlockAddrs, lockers: 3, perLocker: 16, contended: true,
		outside: time.Millisecond, maxWait: hotMaxWait, duration: b.cfg.Redlock, checkPrefix: t.ID + " ",
		contenders: []contender{stockflowRedlock(), redsyncDefaults()}})
}
