package harness

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// The harness is only worth its numbers if its checks fail when they should. These tests run it at toy
// sizes: seconds, not a benchmark.

func TestCounterCheckCatchesALockThatDoesNotExclude(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		c     contender
		exact bool
	}{
		{noLock(), false},
		{stockflowReentrant(), true},
		{redsyncDefaults(), true},
		{redislockRetry(time.Millisecond), true},
		{naiveSpin(5 * time.Millisecond), true},
	} {
		t.Run(tc.c.name, func(t *testing.T) {
			lockers, err := newLockers(tc.c, []string{s.Addr}, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer closeLockers(lockers)
			res, err := load{lockers: lockers, perLocker: 8, key: "k-" + strings.ReplaceAll(tc.c.name, " ", "-"),
				counter: s.Client(), counterKey: "counter", duration: 300 * time.Millisecond, maxWait: time.Second}.run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.ErrorCount > 0 || res.Sections == 0 {
				t.Fatalf("%d sections, %d errors: %v", res.Sections, res.ErrorCount, res.Errors)
			}
			if exact := res.Counter == int64(res.Sections); exact != tc.exact {
				t.Errorf("counter %d after %d sections: exact %v, want %v", res.Counter, res.Sections, exact, tc.exact)
			}
		})
	}
}

func TestRunChecksStockStrategiesAndWritesResults(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs Linux")
	}
	out := t.TempDir()
	cfg := Config{Mode: "smoke", Rounds: 1, Warmup: 20 * time.Millisecond, HotKey: 150 * time.Millisecond,
		StockUnits: 300, StockOrders: 400, StockClients: 16, Out: out,
		Only: map[string]bool{"hotkey": true, "stock": true}}
	report, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) > 0 {
		t.Errorf("checks failed: %v", report.Problems)
	}
	stock := report.Tables[len(report.Tables)-1]
	if got := stock.value("naive GET/SET", "oversold"); got <= 0 {
		t.Errorf("naive strategy oversold %v units, want > 0", got)
	}
	if got := stock.value("atomic script", "sold"); got != 300 {
		t.Errorf("atomic script sold %v, want 300", got)
	}
	for _, name := range []string{"smoke-hotkey-stock.json", "smoke-hotkey-stock-lock-waits.png"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}

	// With no more orders than stock, the naive strategy cannot oversell: its check must fail.
	cfg.Only, cfg.StockOrders = map[string]bool{"stock": true}, 300
	report, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(report.Problems, "\n"), "naive GET/SET: oversells") {
		t.Errorf("a naive strategy that did not oversell passed its check; problems: %v", report.Problems)
	}
}

func TestOnlyRunsTheNamedComparisonsInOrderAndNamesTheFilesAfterThem(t *testing.T) {
	only, err := ParseOnly("stock,hotkey")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Mode: "quick", Only: only}
	if got := strings.Join(cfg.selected(), ","); got != "hotkey,stock" {
		t.Errorf("selected %s, want hotkey,stock", got)
	}
	if got := cfg.resultName(); got != "quick-hotkey-stock" {
		t.Errorf("result name %s, want quick-hotkey-stock", got)
	}
	if got := (Config{Mode: "full"}).resultName(); got != "full" {
		t.Errorf("result name of a whole run %s, want full", got)
	}
	if _, err := ParseOnly("hotkey,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("ParseOnly accepted an unknown comparison: %v", err)
	}
}

// timerNotFired is a context whose deadline has passed but whose timer has not fired yet: what a load
// goroutine sees when its client's socket deadline ends a call first.
type timerNotFired struct {
	context.Context
	deadline time.Time
}

func (c timerNotFired) Deadline() (time.Time, bool) { return c.deadline, true }

func TestAnAcquisitionCutOffByTheSocketDeadlineCountsAsStopped(t *testing.T) {
	if !stopped(timerNotFired{context.Background(), time.Now().Add(-time.Millisecond)}) {
		t.Error("deadline passed, context not yet done: not stopped, so its i/o timeout would count as an error")
	}
	if stopped(timerNotFired{context.Background(), time.Now().Add(time.Hour)}) {
		t.Error("stopped an hour before the deadline")
	}
	if stopped(context.Background()) {
		t.Error("stopped without a deadline")
	}
}

// Issue 29's targets are judged off comparison 8's tables: costs as at most a ratio of the ideal's (or a
// value), rates as at least Watermill's.
func TestTheCostTargetsAreJudgedOffComparisonEight(t *testing.T) {
	uniform := costTable("cost-uniform", "uniform", 100)
	uniform.add("stockflow worker", map[string]float64{"redis_cpu_us": 26, "consumer_cpu_us": 60, "round_trips": 0.09, "orders_per_s": 900})
	uniform.add("Watermill ack-only", map[string]float64{"redis_cpu_us": 30, "consumer_cpu_us": 90, "round_trips": 2, "orders_per_s": 1000})
	uniform.add("minimal ideal", map[string]float64{"redis_cpu_us": 20, "consumer_cpu_us": 20, "round_trips": 0.04, "orders_per_s": 3000})
	uniform.add("stockflow worker, 2-line baskets", map[string]float64{"redis_cpu_us": 70})
	r := &Report{Tables: []*Table{uniform}}
	got := map[string]Target{}
	for _, tg := range r.judgeTargets() {
		got[tg.Name] = tg
	}
	for name, want := range map[string]struct {
		got float64
		met bool
	}{
		"cost uniform: Redis CPU vs minimal ideal":            {1.3, true},
		"cost uniform: worker CPU vs minimal ideal":           {3, false},
		"cost uniform: round trips per order":                 {0.09, true},
		"cost uniform: drain rate vs Watermill ack-only":      {0.9, false},
		"cost: 2-line basket's Redis CPU vs a single order's": {70.0 / 26, false},
	} {
		if tg, ok := got[name]; !ok || math.Abs(tg.Got-want.got) > 1e-9 || tg.Met != want.met {
			t.Errorf("%s: judged %+v (found %v), want %v met %v", name, tg, ok, want.got, want.met)
		}
	}
	if _, ok := got["cost hot SKU: round trips per order"]; ok {
		t.Error("a target of the hot-SKU table was judged without the table")
	}
}

// The consumers' CPU is read to the nanosecond: a 10 ms clock tick is too coarse for a drain that costs the
// minimal ideal about 120 ms. This process's count must agree with getrusage (microseconds), to 2 ms.
func TestProcessCPUCountsNanosecondsAcrossThreads(t *testing.T) {
	pid := os.Getpid()
	if _, ok := threadsCPU(pid); !ok {
		t.Skip("this kernel keeps no per-thread schedstat times; processCPU reads clock ticks")
	}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for start := rusage(); rusage()-start < 37*time.Millisecond; {
	}
	got, want := processCPU(pid), rusage()
	if d := got - want; d < -2*time.Millisecond || d > 2*time.Millisecond {
		t.Fatalf("processCPU %v, getrusage %v", got, want)
	}
}

// Comparison 9 at toy size: both Pub/Subs drain every message; watermill-redisstream's known cost, a read and
// an ack per message, shows as 2 round trips; the harness's own calls (INFO, XINFO GROUPS) are not counted.
func TestPubSubCountsWhatTheContendersSentAndEveryMessage(t *testing.T) {
	cfg := Config{Mode: "smoke", Rounds: 1, PubSubMessages: 300, PubSubIdle: 200 * time.Millisecond,
		Only: map[string]bool{"pubsub": true}}
	report, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) > 0 {
		t.Errorf("checks failed: %v", report.Problems)
	}
	drain, idle := report.table("pubsub-drain"), report.table("pubsub-idle")
	for _, c := range pubSubContenders {
		if got := drain.value(c.name, "msgs_per_s"); !(got > 0) {
			t.Errorf("%s drained %v messages/s", c.name, got)
		}
	}
	if got := drain.value("watermill-redisstream", "round_trips"); got < 1.95 || got > 2.1 {
		t.Errorf("watermill-redisstream: %v round trips per message, want 2 (XREADGROUP COUNT 1, XACK)", got)
	}
	if got := idle.value("nobody subscribed", "commands_per_s"); got != 0 {
		t.Errorf("nobody subscribed, yet %v commands/s: the harness's own were counted", got)
	}
	if got := idle.value("watermill-redisstream, after traffic", "commands_per_s"); got < 20 {
		t.Errorf("watermill-redisstream after traffic: %v commands/s, want its 16 reads every 100-200 ms", got)
	}
}

func TestTheTallyCountsAMessageSeenTwiceOrNotOursAsExtra(t *testing.T) {
	tl := newTally(2)
	for _, payload := range []string{"00000000 x", "00000001 x", "00000001 x", "00000002 x", "junk"} {
		_ = tl.handle(message.NewMessage("id", []byte(payload)))
	}
	if tl.count.Load() != 2 || tl.extra.Load() != 3 {
		t.Errorf("count %d, extra %d; want 2 and 3", tl.count.Load(), tl.extra.Load())
	}
	select {
	case <-tl.all:
	default:
		t.Error("every message seen, all not closed")
	}
}
