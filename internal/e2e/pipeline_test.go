package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/history"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// noPending asserts the consumer group has no pending entries: every order was acked. An outcome is
// visible just before its entry is acked, so it waits a little.
func noPending(t *testing.T, rdb *redis.Client) {
	t.Helper()
	// 25 s: after crashes, a killed worker counts as live (a partition's owner) for up to 15 s, and its
	// entries are claimed CLAIM_IDLE after that (docs/scaling.md: both owners of a partition killed).
	waitFor(t, 25*time.Second, "no entry is pending", func() bool {
		p, err := rdb.XPending(context.Background(), "orders", "inventory").Result()
		if err != nil {
			t.Fatal(err)
		}
		return p.Count == 0
	})
}

// noLocks asserts that no SKU lock is left in Redis.
func noLocks(t *testing.T, rdb *redis.Client) {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "lock:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("locks left behind: %v", keys)
	}
}

func TestOversellWithThreeWorkers(t *testing.T) {
	s := redistest.Start(t)
	for i := range 3 {
		startWorker(t, s, fmt.Sprintf("w%d", i))
	}
	sum := produce(t, s, "--orders", "6000", "--sku-list", "HOT", "--seed-stock", "5000")
	assertConsistent(t, sum)
	hot := sum.SKUs["HOT"]
	if sum.Reserved != 5000 || sum.Rejected != 1000 || hot.Available != 0 || hot.Reserved != 5000 {
		t.Fatalf("reserved %d rejected %d available %d stock reserved %d; want 5000 1000 0 5000",
			sum.Reserved, sum.Rejected, hot.Available, hot.Reserved)
	}
	if sum.Outcomes != 6000 {
		t.Fatalf("%d distinct outcomes, want 6000", sum.Outcomes)
	}
	noPending(t, s.Client())
	noLocks(t, s.Client())
}

func TestZipfMixIsConsistent(t *testing.T) {
	s := redistest.Start(t)
	startWorker(t, s, "w0")
	startWorker(t, s, "w1")
	sum := produce(t, s, "--orders", "20000", "--skus", "100", "--distribution", "zipf", "--seed-stock", "150")
	assertConsistent(t, sum)
	if sum.Rejected == 0 || sum.Reserved == 0 {
		t.Fatalf("reserved %d rejected %d: the mix should exhaust the hot SKUs", sum.Reserved, sum.Rejected)
	}
	noPending(t, s.Client())
}

func TestCrashingWorkers(t *testing.T) {
	s := redistest.Start(t)
	rec := newRecording(t)
	workers := []*proc{startWorker(t, s, "c0", rec.env()), startWorker(t, s, "c1", rec.env()), startWorker(t, s, "c2", rec.env())}
	stop := make(chan struct{})
	chaos := make(chan int)
	go func() {
		kills := 0
		defer func() { chaos <- kills }()
		for n := 3; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1500+rand.IntN(1000)) * time.Millisecond):
			}
			i := rand.IntN(len(workers))
			workers[i].signal(syscall.SIGKILL)
			kills++
			workers[i] = startWorker(t, s, fmt.Sprintf("c%d", n), rec.env())
		}
	}()
	sum := produce(t, s, "--orders", "20000", "--skus", "50", "--distribution", "zipf", "--seed-stock", "300",
		"--rate", "2000")
	close(stop)
	kills := <-chaos
	t.Logf("%d workers killed; %d duplicate outcome events", kills, sum.Duplicates)
	if kills < 3 {
		t.Fatalf("only %d workers killed: the test did not exercise crashes", kills)
	}
	assertConsistent(t, sum) // includes: reserved stock equals the reserved outcomes (nothing decremented twice)
	rec.verify(t, sum)       // and every operation, also those cut short by a kill, fits one serial order
}

func TestPausedHolderIsFenced(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	// Worker A holds each write back for 4 s after taking the lock: long enough to be paused past its
	// 1 s lease while it holds the lock, with its write still to come (checked below: on a loaded machine
	// the pause could come late).
	rec := newRecording(t)
	a := startWorker(t, s, "a", "LOCK_LEASE=1s", "LOCK_WAIT=10s", "CLAIM_IDLE=60s", "FAULT_DELAY_WRITE=4s", rec.env())
	if err := rdb.HSet(ctx, "stock:{P}", "available", 10, "reserved", 0).Err(); err != nil {
		t.Fatal(err)
	}
	xaddOrder(t, rdb, "o-a", "P", 1)
	waitFor(t, 10*time.Second, "worker a holds the lock", lockHeldBy(rdb, "P", "a:"))
	a.pause()
	if rdb.Exists(ctx, "order:{P}:o-a").Val() == 1 {
		t.Fatal("worker a wrote before it was paused: the test did not exercise a stale write")
	}
	// B takes the lock once A's lease ran out, and writes with a newer token. It reads its own stream:
	// Redis would hand an entry of the shared stream to one of A's consumers, blocked in XREADGROUP
	// while their process is stopped.
	startWorker(t, s, "b", "LOCK_LEASE=1s", "LOCK_WAIT=10s", "CLAIM_IDLE=60s", "ORDERS_STREAM=orders-b", rec.env())
	xaddOrderTo(t, rdb, "orders-b", "o-b", "P", 1)
	waitFor(t, 10*time.Second, "worker b reserved o-b", func() bool {
		return rdb.Exists(ctx, "order:{P}:o-b").Val() == 1
	})
	if !a.stopped() {
		t.Fatal("worker a was running again before the test resumed it: the test did not exercise a paused holder")
	}
	a.signal(syscall.SIGCONT)
	waitFor(t, 15*time.Second, "worker a decided o-a", func() bool {
		return rdb.Exists(ctx, "order:{P}:o-a").Val() == 1
	})
	if !strings.Contains(a.logText(), "stale fencing token") {
		t.Fatal("worker a's delayed write was not refused by the fencing check (no stale fencing token in its log)")
	}
	stock, _ := rdb.HGetAll(ctx, "stock:{P}").Result()
	if stock["available"] != "8" || stock["reserved"] != "2" {
		t.Fatalf("stock %v, want available 8 reserved 2: each order reserved exactly once", stock)
	}
	history.Verify(t, rec.files(t), map[string]int64{"P": 10})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestForeignAndBadEntries(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	startWorker(t, s, "w0")
	if err := rdb.HSet(ctx, "stock:{SKU-1}", "available", 100, "reserved", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name   string
		fields []string
		reason string // part of the poison reason
	}{
		{"missing payload", []string{"order", "x"}, `no "payload" field`},
		{"bad JSON", []string{"payload", `{"order_id":`}, "not an order JSON object"},
		{"negative quantity", []string{"payload", `{"order_id":"o-neg","sku":"SKU-1","quantity":-1}`}, "quantity"},
		{"huge quantity", []string{"payload", `{"order_id":"o-huge","sku":"SKU-1","quantity":99999999999}`}, "quantity"},
		{"bad SKU", []string{"payload", `{"order_id":"o-sku","sku":"SKU 1!","quantity":1}`}, "sku"},
		{"oversized payload", []string{"payload", `{"order_id":"o-big","sku":"SKU-1","quantity":1,"pad":"` + strings.Repeat("x", 70<<10) + `"}`}, "limit"},
	}
	ids := map[string]string{}
	for _, b := range bad {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: b.fields}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = b.name
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders",
		Values: []string{"payload", `{"order_id":"o-good","sku":"SKU-1","quantity":3}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the valid plain entry sent after the bad ones is reserved", func() bool {
		return rdb.Exists(ctx, "order:{SKU-1}:o-good").Val() == 1
	})
	// Consumers work in parallel: the good entry may be decided before the last bad one is poisoned.
	waitFor(t, 15*time.Second, "every bad entry is handled", func() bool {
		return rdb.XLen(ctx, "orders-poison").Val() >= int64(len(bad))
	})
	poison, err := rdb.XRange(ctx, "orders-poison", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, e := range poison {
		src, _ := e.Values["poison_source_id"].(string)
		name, ok := ids[src]
		if !ok {
			t.Fatalf("unexpected poison entry %v", e.Values)
		}
		reason, _ := e.Values["poison_reason"].(string)
		for _, b := range bad {
			if b.name == name && !strings.Contains(reason, b.reason) {
				t.Errorf("%s: poison reason %q does not mention %q", name, reason, b.reason)
			}
		}
		if name == "missing payload" && e.Values["order"] != "x" {
			t.Errorf("missing payload: original fields not kept: %v", e.Values)
		}
		found[name] = true
	}
	if len(found) != len(bad) {
		t.Fatalf("poisoned %v, want all of %d bad entries", found, len(bad))
	}
	if v := rdb.HGet(ctx, "stock:{SKU-1}", "available").Val(); v != "97" {
		t.Fatalf("available %s, want 97: only the valid order reserved", v)
	}
	noPending(t, rdb)
}

func TestRedisRestartMidRun(t *testing.T) {
	s := redistest.Start(t, redistest.WithPersistence())
	rec := newRecording(t)
	startWorker(t, s, "w0", rec.env())
	startWorker(t, s, "w1", rec.env())
	go func() {
		time.Sleep(2 * time.Second)
		s.Restart()
	}()
	sum := produce(t, s, "--orders", "12000", "--skus", "20", "--seed-stock", "500", "--rate", "3000")
	assertConsistent(t, sum)
	rec.verify(t, sum)
}

func TestSIGTERMUnderLoad(t *testing.T) {
	s := redistest.Start(t)
	leaving := startWorker(t, s, "leaving")
	startWorker(t, s, "staying")
	stopped := make(chan struct {
		err  error
		took time.Duration
	}, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		leaving.signal(syscall.SIGTERM)
		err, ok := leaving.exited(10 * time.Second)
		if !ok {
			err = fmt.Errorf("still running 10s after SIGTERM (shutdown timeout 5s)")
		}
		stopped <- struct {
			err  error
			took time.Duration
		}{err, time.Since(start)}
	}()
	sum := produce(t, s, "--orders", "10000", "--skus", "30", "--seed-stock", "400", "--rate", "2500")
	res := <-stopped
	if res.err != nil {
		t.Fatalf("worker after SIGTERM: %v, want exit 0", res.err)
	}
	t.Logf("worker exited %v after SIGTERM", res.took)
	assertConsistent(t, sum)
	noPending(t, s.Client())
	noLocks(t, s.Client())
}

func TestRedlockMode(t *testing.T) {
	s := redistest.Start(t)
	masters := redistest.StartN(t, 3)
	var urls []string
	for _, m := range masters {
		urls = append(urls, m.URL())
	}
	redlock := "REDLOCK_URLS=" + strings.Join(urls, ",")
	for i := range 3 {
		startWorker(t, s, fmt.Sprintf("w%d", i), redlock)
	}
	sum := produce(t, s, "--orders", "3000", "--sku-list", "HOT,COLD", "--distribution", "hot", "--seed-stock", "1000")
	assertConsistent(t, sum)
	if sum.SKUs["HOT"].Available != 0 || sum.Rejected == 0 {
		t.Fatalf("HOT available %d, rejected %d: the hot SKU should sell out", sum.SKUs["HOT"].Available, sum.Rejected)
	}
	if n := masters[0].Client().Exists(context.Background(), "redisson_lock_token:lock:{HOT}").Val(); n != 1 {
		t.Fatal("no fencing counter on the Redlock masters: the locks were not taken there")
	}
	if n := s.Client().Exists(context.Background(), "redisson_lock_token:lock:{HOT}").Val(); n != 0 {
		t.Fatal("a lock was taken on the stock Redis although Redlock is configured")
	}
}

// With OTEL_TRACES_EXPORTER=console the worker prints its spans. An order takes its lock with its stock
// script when the lock is free (lock elision), so the lock's own span shows with LOCK_ELISION=false.
func TestConsoleTraceExporter(t *testing.T) {
	for _, tc := range []struct {
		elision string
		spans   []string
	}{
		{"true", []string{`"Name":"process orders"`, `"Name":"stock reserve batch"`, `"stockflow.stock.lock_elided"`}},
		{"false", []string{`"Name":"process orders"`, `"Name":"lock acquire"`, `"Name":"stock reserve batch"`}},
	} {
		t.Run("LOCK_ELISION="+tc.elision, func(t *testing.T) { consoleTraces(t, tc.spans, "LOCK_ELISION="+tc.elision) })
	}
}

func consoleTraces(t *testing.T, spans []string, env ...string) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	w := startWorker(t, s, "w0", append(env, "OTEL_TRACES_EXPORTER=console")...)
	if err := rdb.HSet(ctx, "stock:{SKU-1}", "available", 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders",
		Values: []string{"payload", `{"order_id":"o-1","sku":"SKU-1","quantity":1}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the order is reserved", func() bool {
		return rdb.Exists(ctx, "order:{SKU-1}:o-1").Val() == 1
	})
	w.signal(syscall.SIGTERM) // shutdown flushes the batched spans
	if err, ok := w.exited(10 * time.Second); !ok || err != nil {
		t.Fatalf("worker exit: %v (exited %v)", err, ok)
	}
	for _, span := range spans {
		if !strings.Contains(w.logText(), span) {
			t.Fatalf("worker printed no %s with OTEL_TRACES_EXPORTER=console", span)
		}
	}
}

// A holder paused past its lease is refused as soon as a newer holder has the lock, before that one
// writes (#17). Worker A is paused while it holds the lock, past its lease; B takes the lock and holds its own write
// back; A resumes and its write must be refused although B has not written yet: with the reentrant lock
// because the stock script compares with the lock's counter, with Redlock because B raised the stock's
// fence when it acquired.
func TestStaleHolderIsRefusedBeforeTheNewHolderWrites(t *testing.T) {
	for _, redlock := range []bool{false, true} {
		t.Run(map[bool]string{false: "reentrant", true: "redlock"}[redlock], func(t *testing.T) {
			testStaleHolderIsRefused(t, redlock)
		})
	}
}

func testStaleHolderIsRefused(t *testing.T, redlock bool) {
	sc := startStaleHolder(t, redlock)
	ctx, rdb := context.Background(), sc.rdb
	// 20 s: once (1 of ~20 CI runs, under load) the refusal had not come 8 s after A was resumed; the
	// history then shows how far A got.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(sc.a.logText(), sc.refusal); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker a's write was not refused within 20 s; the history:\n%s", sc.rec.text(t))
		}
	}
	stock, _ := rdb.HGetAll(ctx, "stock:{P}").Result()
	if rdb.Exists(ctx, "order:{P}:o-b").Val() != 0 || stock["available"] != "10" {
		t.Fatalf("stock %v, o-b decided %v when a's write was refused: b must not have written yet, nor a",
			stock, rdb.Exists(ctx, "order:{P}:o-b").Val() == 1)
	}
	sc.bothDecided(t)
	history.Verify(t, sc.rec.files(t), map[string]int64{"P": 10})
}

// The history checker catches a broken fence: the same run with a worker set to send its writes
// unfenced (as if the store's fencing check were off) keeps the stock exact, each write being atomic,
// but A's stale write is accepted after B got its token, and the fencing check must say so.
func TestHistoryCheckerCatchesABrokenFence(t *testing.T) {
	sc := startStaleHolder(t, false, "FAULT_BROKEN_FENCE=true")
	sc.bothDecided(t)
	h, err := history.Load(sc.rec.files(t)...)
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(h, map[string]int64{"P": 10}, 0)
	t.Logf("the broken variant's report:\n%s", r)
	if r.OK() || len(r.Violations) == 0 {
		t.Fatalf("the history checker passed a run whose stale write was accepted; the history:\n%s", sc.rec.text(t))
	}
	if v := r.Violations[0]; v.Rule != history.StaleToken || v.Write.Worker != "a" || v.Newer.Worker != "b" {
		t.Fatalf("first violation %s, want worker a's write accepted after worker b's acquisition", v)
	}
}

// staleHolder: worker A holds the lock of P and is paused past its lease with its write still to come;
// worker B takes the lock and holds its own write back 10 s; then A is resumed. Both record their history.
type staleHolder struct {
	rdb     *redis.Client
	a       *proc
	refusal string // what A logs when its write is refused
	rec     *recording
}

// startStaleHolder sets the scene and resumes A; aEnv are more settings of A.
func startStaleHolder(t *testing.T, redlock bool, aEnv ...string) *staleHolder {
	s := redistest.Start(t)
	sc := &staleHolder{rdb: s.Client(), refusal: "below the lock's current token", rec: newRecording(t)}
	locks, ctx := sc.rdb, context.Background()
	env := []string{"LOCK_LEASE=1s", "CLAIM_IDLE=60s", sc.rec.env()}
	if redlock {
		masters := redistest.StartN(t, 3)
		env = append(env, "REDLOCK_URLS="+strings.Join([]string{masters[0].URL(), masters[1].URL(), masters[2].URL()}, ","))
		locks, sc.refusal = masters[0].Client(), "below the stored fence"
	}
	sc.a = startWorker(t, s, "a", append(append(env, "LOCK_WAIT=20s", "FAULT_DELAY_WRITE=3s"), aEnv...)...)
	if err := sc.rdb.HSet(ctx, "stock:{P}", "available", 10, "reserved", 0).Err(); err != nil {
		t.Fatal(err)
	}
	xaddOrder(t, sc.rdb, "o-a", "P", 1)
	waitFor(t, 10*time.Second, "worker a holds the lock", lockHeldBy(locks, "P", "a:"))
	// Paused only once its acquisition is recorded, its write then 3 s away (FAULT_DELAY_WRITE): with
	// Redlock, the lock on the first master is not the acquisition yet, and A paused midway took the lock
	// again after B, with a newer token, and was not stale at all (seen once).
	waitFor(t, 10*time.Second, "worker a recorded its acquisition", func() bool {
		return strings.Contains(sc.rec.text(t), `"event":"acquired","worker":"a"`)
	})
	sc.a.pause()
	startWorker(t, s, "b", append(env, "LOCK_WAIT=10s", "ORDERS_STREAM=orders-b", "FAULT_DELAY_WRITE=10s")...)
	xaddOrderTo(t, sc.rdb, "orders-b", "o-b", "P", 1)
	waitFor(t, 10*time.Second, "worker b holds the lock", lockHeldBy(locks, "P", "b:"))
	// B's handler has started only once its acquisition is recorded (with Redlock after it raised the
	// stock's fence): resuming A before that would race B's fence, and the test would prove nothing.
	waitFor(t, 10*time.Second, "worker b recorded its acquisition", func() bool {
		return strings.Contains(sc.rec.text(t), `"event":"acquired","worker":"b"`)
	})
	if !sc.a.stopped() {
		t.Fatal("worker a was running again before the test resumed it")
	}
	sc.a.signal(syscall.SIGCONT)
	return sc
}

// bothDecided waits for both orders and checks that each reserved exactly once.
func (sc *staleHolder) bothDecided(t *testing.T) {
	ctx := context.Background()
	waitFor(t, 40*time.Second, "both orders decided", func() bool {
		return sc.rdb.Exists(ctx, "order:{P}:o-a").Val() == 1 && sc.rdb.Exists(ctx, "order:{P}:o-b").Val() == 1
	})
	stock, _ := sc.rdb.HGetAll(ctx, "stock:{P}").Result()
	if stock["available"] != "8" || stock["reserved"] != "2" {
		t.Fatalf("stock %v, want available 8 reserved 2: each order reserved exactly once", stock)
	}
}
