package harness

import (
	"fmt"
	"math"
)

// A target is one acceptance target of issue 8, or as issue 12 raised it, judged on the medians.
type target interface {
	// judge reads the target off the report; false when the comparison it needs did not run.
	judge(r *Report) (Target, bool)
}

// targets are judged in this order.
var targets = []target{
	ratioTarget{"uncontended, 1 goroutine, vs redislock", "uncontended-g1", "ops_per_s", "stockflow", "redislock", 1.0},
	ratioTarget{"uncontended, 1 goroutine, vs physical limit", "uncontended-g1", "ops_per_s", "stockflow", physicalLimit, 0.85},
	ratioTarget{"uncontended, 32 goroutines, vs redislock", "uncontended-g32", "ops_per_s", "stockflow", "redislock", 1.0},
	ratioTarget{"uncontended, 32 goroutines, vs physical limit", "uncontended-g32", "ops_per_s", "stockflow", physicalLimit, 0.85},
	ratioTarget{"hot key, 1 ms outside, vs redsync defaults", "hotkey-1ms", "sections_per_s", "stockflow", "redsync", 4},
	ratioTarget{"hot key, 1 ms outside, vs redislock 1 ms", "hotkey-1ms", "sections_per_s", "stockflow", "redislock 1ms", 3},
	hotKeyWaitTarget{},
	ratioTarget{"Redlock uncontended vs redsync", "redlock-uncontended", "ops_per_s", "stockflow", "redsync", 1.0},
	ratioTarget{"Redlock hot key vs redsync", "redlock-hotkey", "sections_per_s", "stockflow", "redsync", 1.5},
	ratioTarget{"end to end uniform: lock on vs off", "e2e-uniform", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.9},
	ratioTarget{"end to end hot SKU: lock on vs off", "e2e-hot", "orders_per_s", e2eModes[0].name, e2eModes[1].name, 0.85},
	workerRSSTarget{},
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

// ratioTarget: in table, the median of key of contender of is at least want times that of base.
type ratioTarget struct {
	name, table, key, of, base string
	want                       float64
}

func (rt ratioTarget) judge(r *Report) (Target, bool) {
	t := r.table(rt.table)
	if t == nil {
		return Target{}, false
	}
	of, base := t.value(rt.of, rt.key), t.value(rt.base, rt.key)
	tg := Target{Name: rt.name, Want: fmt.Sprintf(">= %.2fx", rt.want), Unit: "x",
		Detail: fmt.Sprintf("%s vs %s; by round %s", format(of, 0), format(base, 0), t.pairedRatios(rt.of, rt.base, rt.key))}
	return tg.judged(of/base, func(got float64) bool { return got >= rt.want }), true
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
