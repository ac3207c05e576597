package harness

import (
	"fmt"
	"math"
)

// A target is one acceptance target of issue 8 (or as issues 12 and 45 raised it) or of issue 29, judged on
// the medians.
type target interface {
	// judge reads the target off the report; false when the comparison it needs did not run.
	judge(r *Report) (Target, bool)
}

// targets are judged in this order. The lock's are issue 45's where it raised issue 8's and 12's: the
// uncontended lock at least the physical limit and at most its Redis CPU, Redlock 1.2x redsync
// uncontended and 8x hot, the hot key 10x redsync.
var targets = []target{
	ratioTarget{"uncontended, 1 goroutine, vs redislock", "uncontended-g1", "ops_per_s", "stockflow", "redislock", 1.0, false},
	ratioTarget{"uncontended, 1 goroutine, vs physical limit", "uncontended-g1", "ops_per_s", "stockflow", physicalLimit, 1.0, false},
	ratioTarget{"uncontended, 1 goroutine: Redis CPU vs physical limit", "uncontended-g1", "redis_cpu_us", "stockflow", physicalLimit, 1.0, true},
	ratioTarget{"uncontended, 32 goroutines, vs redislock", "uncontended-g32", "ops_per_s", "stockflow", "redislock", 1.0, false},
	ratioTarget{"uncontended, 32 goroutines, vs physical limit", "uncontended-g32", "ops_per_s", "stockflow", physicalLimit, 0.85, false},
	ratioTarget{"hot key, 1 ms outside, vs redsync defaults", "hotkey-1ms", "sections_per_s", "stockflow", "redsync", 10, false},
	ratioTarget{"hot key, 1 ms outside, vs redislock 1 ms", "hotkey-1ms", "sections_per_s", "stockflow", "redislock 1ms", 3, false},
	hotKeyWaitTarget{},
	ratioTarget{"Redlock uncontended vs redsync", "redlock-uncontended", "ops_per_s", "stockflow", "redsync", 1.2, false},
	ratioTarget{"Redlock hot key vs redsync", "redlock-hotkey", "sections_per_s", "stockflow", "redsync", 8, false},
	ratioTarget{"end to end uniform: lock on vs off", "e2e-uniform", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.9, false},
	ratioTarget{"end to end hot SKU: lock on vs off", "e2e-hot", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.85, false},
	workerRSSTarget{},
}

// The targets of issue 29 (the cost of an order, comparison 8).
func init() {
	const worker, wm, ideal = "stockflow worker", "Watermill ack-only", "minimal ideal"
	for _, wl := range []struct{ table, name string }{{"cost-uniform", "uniform"}, {"cost-hot", "hot SKU"}} {
		targets = append(targets,
			ratioTarget{"cost " + wl.name + ": Redis CPU vs minimal ideal", wl.table, "redis_cpu_us", worker, ideal, 1.3, true},
			ratioTarget{"cost " + wl.name + ": worker CPU vs minimal ideal", wl.table, "consumer_cpu_us", worker, ideal, 2.5, true},
			valueTarget{"cost " + wl.name + ": round trips per order", wl.table, "round_trips", worker, 0.2},
			ratioTarget{"cost " + wl.name + ": drain rate vs Watermill ack-only", wl.table, "orders_per_s", worker, wm, 1, false})
	}
	targets = append(targets,
		ratioTarget{"cost: 2-line basket's Redis CPU vs a single order's", "cost-uniform", "redis_cpu_us",
			worker + ", 2-line baskets", worker, 2.5, true},
		valueTarget{"cost: idle Redis CPU, % of a core", "cost-idle", "redis_cpu_pct", "keyspace events (default)", 1},
		valueTarget{"cost: light load, 8 workers: reads per order", "cost-light", "reads", worker, 3})
}

// judgeTargets judges every target whose comparison ran.
func (r *Report) judgeTargets() []Target {
	var out []Target
	for _, tg := range targets {
		if judged, ok := tg.judge(r); ok {
			out = append(out, judged)
		}
	}
	return out
}

// ratioTarget: in table, the median of key of contender of is at least want times that of base (a rate),
// or at most (atMost: a cost).
type ratioTarget struct {
	name, table, key, of, base string
	want                       float64
	atMost                     bool
}

func (rt ratioTarget) judge(r *Report) (Target, bool) {
	t := r.table(rt.table)
	if t == nil {
		return Target{}, false
	}
	of, base, digits := t.value(rt.of, rt.key), t.value(rt.base, rt.key), 0
	if rt.atMost {
		digits = 1 // µs
	}
	tg := Target{Name: rt.name, Want: fmt.Sprintf(">= %.2fx", rt.want), Unit: "x",
		Detail: fmt.Sprintf("%s vs %s; by round %s", format(of, digits), format(base, digits), t.pairedRatios(rt.of, rt.base, rt.key))}
	if rt.atMost {
		tg.Want = fmt.Sprintf("<= %.2fx", rt.want)
		return tg.judged(of/base, func(got float64) bool { return got <= rt.want }), true
	}
	return tg.judged(of/base, func(got float64) bool { return got >= rt.want }), true
}

// valueTarget: in table, the median of key of contender of is at most max.
type valueTarget struct {
	name, table, key, of string
	max                  float64
}

func (vt valueTarget) judge(r *Report) (Target, bool) {
	t := r.table(vt.table)
	if t == nil || t.find(vt.of) == nil {
		return Target{}, false
	}
	tg := Target{Name: vt.name, Want: fmt.Sprintf("<= %g", vt.max)}
	return tg.judged(t.value(vt.of, vt.key), func(got float64) bool { return got <= vt.max }), true
}

// hotKeyWaitTarget: stockflow's p99 wait on the hot key with 1 ms outside is at most 50 ms.
type hotKeyWaitTarget struct{}

func (hotKeyWaitTarget) judge(r *Report) (Target, bool) {
	t := r.table("hotkey-1ms")
	if t == nil {
		return Target{}, false
	}
	tg := Target{Name: "hot key, 1 ms outside, stockflow p99 wait", Want: "<= 50 ms", Unit: " ms"}
	return tg.judged(t.value("stockflow", "p99_wait_ms"), func(got float64) bool { return got <= 50 }), true
}

// workerRSSTarget: the larger peak RSS of the workers with stockflow's lock, over both workloads, is at
// most 64 MiB.
type workerRSSTarget struct{}

func (workerRSSTarget) judge(r *Report) (Target, bool) {
	rss := 0.0
	for _, t := range []*Table{r.table("e2e-uniform"), r.table("e2e-hot")} {
		if t != nil {
			rss = max(rss, t.value(e2eModes[0].name, "rss_mib"))
		}
	}
	return Target{Name: "worker peak RSS, lock on", Want: "<= 64 MiB", Got: rss, Unit: " MiB", Met: rss <= 64}, rss > 0
}

// judged sets Got and Met; a value that could not be measured counts as 0 and says so.
func (tg Target) judged(got float64, met func(float64) bool) Target {
	if math.IsNaN(got) || math.IsInf(got, 0) {
		tg.Detail = "not measured; " + tg.Detail
		got = 0
	}
	tg.Got, tg.Met = got, met(got)
	return tg
}
