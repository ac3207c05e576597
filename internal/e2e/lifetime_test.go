package e2e

// One test per problem of running for months (issue "Exact over the life of a deployment"): each would
// fail on the worker before the fix.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// readyz returns the status code of /readyz (0 when the worker does not answer) and the body.
func readyz(addr string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

func xaddOrder(t *testing.T, rdb *redis.Client, id, sku string, qty int) string {
	t.Helper()
	return xaddOrderTo(t, rdb, "orders", id, sku, qty)
}

// xaddOrderTo adds an order to stream as a plain entry and returns its entry id.
func xaddOrderTo(t *testing.T, rdb *redis.Client, stream, id, sku string, qty int) string {
	t.Helper()
	eid, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream,
		Values: []string{"payload", fmt.Sprintf(`{"order_id":%q,"sku":%q,"quantity":%d}`, id, sku, qty)}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return eid
}

// lockHeldBy reports whether sku's lock has one holder, whose owner starts with prefix (a worker's name).
func lockHeldBy(rdb *redis.Client, sku, prefix string) func() bool {
	return func() bool {
		owners, _ := rdb.HKeys(context.Background(), "lock:{"+sku+"}").Result()
		return len(owners) == 1 && strings.HasPrefix(owners[0], prefix)
	}
}

func decided(rdb *redis.Client, sku, id string) func() bool {
	return func() bool { return rdb.Exists(context.Background(), "order:{"+sku+"}:"+id).Val() == 1 }
}

// (1) Redis restarted without persistence: the group is gone. The worker creates it again, decides new
// orders, and /readyz says so while the group is missing or Redis is down.
func TestLostConsumerGroupIsRecreated(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	addr := freeAddr(t)
	w := startWorker(t, s, "w0", "METRICS_ADDR="+addr)
	rdb.HSet(ctx, "stock:{R}", "available", 10)
	xaddOrder(t, rdb, "before", "R", 1)
	// Settled: its outcome published and its entry acked (a restart between its stock script and its outcome
	// would leave it to be decided again on the emptied Redis).
	waitFor(t, 10*time.Second, "the first order is settled", func() bool {
		return rdb.XLen(ctx, "order-results").Val() == 1 && rdb.XPending(ctx, "orders", "inventory").Val().Count == 0
	})
	waitFor(t, 5*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })

	s.Restart() // no persistence: stream, group and stock are gone
	restarted := time.Now()
	// Until an order creates the stream again there is no group, and the worker says so.
	waitFor(t, 5*time.Second, "/readyz says 503 while the group is missing", func() bool {
		c, body := readyz(addr)
		return c == http.StatusServiceUnavailable && strings.Contains(body, "consumer group inventory of stream orders does not exist")
	})
	rdb.HSet(ctx, "stock:{R}", "available", 10)
	for i := range 3 {
		xaddOrder(t, rdb, "after-"+strconv.Itoa(i), "R", 1)
	}
	sent := time.Now()
	for i := range 3 {
		waitFor(t, 10*time.Second-time.Since(sent), "the orders sent after the restart are decided",
			decided(rdb, "R", "after-"+strconv.Itoa(i)))
	}
	t.Logf("new orders decided %v after they were sent (%v after the restart)", time.Since(sent).Round(time.Millisecond),
		time.Since(restarted).Round(time.Millisecond))
	waitFor(t, 5*time.Second, "the worker is ready again", func() bool { c, _ := readyz(addr); return c == 200 })
	if !strings.Contains(w.logText(), "consumer group was missing") {
		t.Fatal("the worker did not log that it recreated the group")
	}
	if v := rdb.HGet(ctx, "stock:{R}", "available").Val(); v != "7" {
		t.Fatalf("available %s, want 7", v)
	}
}

// The readiness check names a missing group also when the stream key holds another type (the worker's
// XGROUP CREATE fails), and the worker recovers once the key is a stream again.
func TestReadyzReportsMissingGroup(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	addr := freeAddr(t)
	startWorker(t, s, "w0", "METRICS_ADDR="+addr)
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })
	rdb.Del(ctx, "orders")
	rdb.Set(ctx, "orders", "not a stream", 0)
	waitFor(t, 5*time.Second, "/readyz names the missing group", func() bool {
		c, body := readyz(addr)
		return c == http.StatusServiceUnavailable && strings.Contains(body, "consumer group inventory")
	})
	rdb.Del(ctx, "orders")
	xaddOrder(t, rdb, "o-1", "NONE", 1)
	waitFor(t, 10*time.Second, "the worker is ready again once an order made the key a stream", func() bool {
		c, _ := readyz(addr)
		return c == 200
	})
}

// (2) Outcome records expired and a new consumer group starts: nothing is reserved again, because a new
// group starts at $ and the retention trimmed the old entries before their records could expire.
func TestNewGroupAfterRecordsExpiredReservesNothingTwice(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{E}", "available", 100)
	rdb.HSet(ctx, "stock:{S}", "available", 100)
	old := startWorker(t, s, "old", "STREAM_RETENTION=2s", "OUTCOME_TTL=10m")
	for i := range 5 {
		xaddOrder(t, rdb, "e-"+strconv.Itoa(i), "E", 1)
	}
	for i := range 5 {
		waitFor(t, 10*time.Second, "the first orders are decided", decided(rdb, "E", "e-"+strconv.Itoa(i)))
	}
	waitFor(t, 10*time.Second, "the retention trims the decided entries", func() bool {
		return rdb.XLen(ctx, "orders").Val() == 0
	})
	old.signal(syscall.SIGTERM)
	old.exited(10 * time.Second)
	// The records expire (OUTCOME_TTL passes).
	keys, _ := rdb.Keys(ctx, "order:{E}:*").Result()
	rdb.Del(ctx, keys...)

	for i, start := range []string{"$", "0"} {
		group := "fresh-" + strconv.Itoa(i)
		addr := freeAddr(t)
		startWorker(t, s, group, "CONSUMER_GROUP="+group, "CONSUMER_GROUP_START="+start, "METRICS_ADDR="+addr)
		waitFor(t, 10*time.Second, "group "+group+" exists", func() bool { c, _ := readyz(addr); return c == 200 })
		// Entries are delivered in order: once the sentinel is decided, everything before it was seen.
		sentinel := "sentinel-" + strconv.Itoa(i)
		xaddOrder(t, rdb, sentinel, "S", 1)
		waitFor(t, 10*time.Second, "group "+group+" decided its sentinel", decided(rdb, "S", sentinel))
		if r := rdb.HGet(ctx, "stock:{E}", "reserved").Val(); r != "5" {
			t.Fatalf("group %s starting at %s: reserved %s, want 5 (reserved again)", group, start, r)
		}
	}
}

// (3) The worker refuses a Redis that may evict its keys, unless told otherwise, and stops being ready
// when the policy changes under it.
func TestEvictionGuard(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru")
	w := startWorker(t, s, "refused")
	err, ok := w.exited(10 * time.Second)
	if !ok || err == nil {
		t.Fatalf("worker on a volatile-lru Redis: exited %v (%v), want a non-zero exit", ok, err)
	}
	if log := w.logText(); !strings.Contains(log, "maxmemory-policy volatile-lru") || !strings.Contains(log, "noeviction") {
		t.Fatalf("the refusal does not name the setting:\n%s", log)
	}

	addr := freeAddr(t)
	startWorker(t, s, "allowed", "ALLOW_EVICTION=true", "METRICS_ADDR="+addr)
	waitFor(t, 10*time.Second, "the worker with ALLOW_EVICTION is ready", func() bool { c, _ := readyz(addr); return c == 200 })

	rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	addr2 := freeAddr(t)
	startWorker(t, s, "guarded", "METRICS_ADDR="+addr2)
	waitFor(t, 10*time.Second, "the worker on noeviction is ready", func() bool { c, _ := readyz(addr2); return c == 200 })
	rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru")
	waitFor(t, 5*time.Second, "the worker is not ready once Redis may evict", func() bool {
		c, body := readyz(addr2)
		return c == http.StatusServiceUnavailable && strings.Contains(body, "allkeys-lru")
	})
}

// (4) After 20,000 orders and one retention period the orders stream holds nothing that is neither
// pending nor new, the results stream is bounded, and unknown SKUs leave no key without a TTL.
func TestRetentionBoundsWhatRedisKeeps(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	env := []string{"STREAM_RETENTION=3s", "OUTCOME_TTL=10m", "RESULTS_MAXLEN=5000"}
	startWorker(t, s, "w0", env...)
	startWorker(t, s, "w1", env...)
	for i := range 300 {
		xaddOrder(t, rdb, "junk-"+strconv.Itoa(i), "JUNK-"+strconv.Itoa(i), 1)
	}
	// Without --wait: the producer would read outcomes that RESULTS_MAXLEN trims first.
	_, prod := binaries(t)
	cmd := exec.Command(prod, "--orders", "20000", "--skus", "200", "--seed-stock", "80")
	cmd.Env = append(os.Environ(), "REDIS_URL="+s.URL())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("producer: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "every order is delivered and acked", func() bool {
		g := rdb.XInfoGroups(ctx, "orders").Val()
		return len(g) == 1 && g[0].Lag == 0 && g[0].Pending == 0 && g[0].EntriesRead >= 20300
	})
	var reserved int64
	for i := range 200 {
		st := rdb.HGetAll(ctx, "stock:{SKU-"+strconv.Itoa(i)+"}").Val()
		a, _ := strconv.ParseInt(st["available"], 10, 64)
		r, _ := strconv.ParseInt(st["reserved"], 10, 64)
		if a < 0 || a+r != 80 {
			t.Fatalf("SKU-%d: available %d reserved %d, want them to add up to 80", i, a, r)
		}
		reserved += r
	}
	t.Logf("reserved %d units for 20,000 orders of 200 SKUs with 80 each", reserved)
	waitFor(t, 15*time.Second, "one retention period trims the orders stream", func() bool {
		return rdb.XLen(ctx, "orders").Val() == 0
	})
	if n := rdb.XLen(ctx, "order-results").Val(); n > 5200 {
		t.Fatalf("order-results holds %d entries, want about RESULTS_MAXLEN (5000)", n)
	}
	var permanent []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if rdb.PTTL(ctx, key).Val() > 0 {
			continue
		}
		// orders:partitions: one key, the number of partitions the streams are laid out in.
		if strings.HasPrefix(key, "stock:{SKU-") || key == "orders" || key == "order-results" || key == "orders:partitions" {
			continue
		}
		permanent = append(permanent, key)
	}
	if len(permanent) > 0 {
		t.Fatalf("%d keys without a TTL besides stock hashes and streams, e.g. %v", len(permanent), permanent[:min(5, len(permanent))])
	}
}

// (5) Orders of a corrupt SKU (a non-integer stock field, a key of the wrong type) are poisoned with the
// reason within MAX_ATTEMPTS deliveries, while the healthy orders go through.
func TestCorruptSKUIsPoisonedWhileOthersFinish(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{BAD}", "available", "12.5")
	rdb.Set(ctx, "stock:{WT}", "a string", 0)
	startWorker(t, s, "w0", "WORKER_CONCURRENCY=4", "MAX_ATTEMPTS=3")
	bad := map[string]string{}
	for i := range 4 {
		bad[xaddOrder(t, rdb, "bad-"+strconv.Itoa(i), "BAD", 1)] = "not an integer"
	}
	for i := range 2 {
		bad[xaddOrder(t, rdb, "wt-"+strconv.Itoa(i), "WT", 1)] = "WRONGTYPE"
	}
	start := time.Now()
	sum := produce(t, s, "--orders", "1000", "--skus", "10", "--seed-stock", "100")
	assertConsistent(t, sum)
	t.Logf("1,000 healthy orders decided in %v", time.Since(start).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "the corrupt SKUs' orders are poisoned", func() bool {
		return rdb.XLen(ctx, "orders-poison").Val() == int64(len(bad))
	})
	poison, _ := rdb.XRange(ctx, "orders-poison", "-", "+").Result()
	for _, e := range poison {
		id, _ := e.Values["poison_source_id"].(string)
		reason, _ := e.Values["poison_reason"].(string)
		if want, ok := bad[id]; !ok || !strings.Contains(reason, want) || !strings.Contains(reason, "attempt 3") {
			t.Errorf("poison entry of %s: reason %q, want one with %q on attempt 3", id, reason, bad[id])
		}
	}
	noPending(t, rdb)
}

// (6) The SKU's fencing counter is deleted while its stored fence is high (1,000): the next order is refused
// as stale once, the counter is raised to the fence (delivery's recoverFence), and the order is decided
// within 5 s. (An elided batch goes past the fence without the counter: inventory's
// TestReserveBatchElidesAFreeLock.)
func TestLostFencingCounterRecovers(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{F}", "available", 100)
	w := startWorker(t, s, "w0", "LOCK_ELISION=false")
	for i := range 20 {
		xaddOrder(t, rdb, "f-"+strconv.Itoa(i), "F", 1)
	}
	// All 20, not the last one: consumers decide in parallel, and an order still undecided when the
	// counter goes would meet the stale fence too and be retried a second later.
	waitFor(t, 10*time.Second, "the first orders are decided", func() bool {
		return rdb.HGet(ctx, "stock:{F}", "reserved").Val() == "20"
	})
	fence := rdb.HGet(ctx, "stock:{F}", "fence").Val()
	if n, _ := strconv.Atoi(fence); n < 2 {
		t.Fatalf("stored fence %s, want the tokens of several acquisitions", fence)
	}
	// A long-lived SKU's fence is far above 1: without the counter raised to it, the fresh acquisitions would
	// count up to it one stale attempt at a time.
	fence = "1000"
	rdb.HSet(ctx, "stock:{F}", "fence", fence)
	rdb.Del(ctx, "redisson_lock_token:lock:{F}")
	start := time.Now()
	xaddOrder(t, rdb, "after", "F", 1)
	waitFor(t, 5*time.Second, "the order after the counter was lost is decided", decided(rdb, "F", "after"))
	t.Logf("decided %v after the counter was deleted (stored fence %s)", time.Since(start).Round(time.Millisecond), fence)
	if !strings.Contains(w.logText(), "stale fencing token") {
		t.Fatal("no stale fence was met: the test did not exercise the recovery")
	}
	if r := rdb.HGet(ctx, "stock:{F}", "reserved").Val(); r != "21" {
		t.Fatalf("reserved %s, want 21", r)
	}
}

// (7) A 200 MB entry never enters the worker: it is poisoned and deleted inside Redis, the worker's peak
// RSS stays under 100 MiB, and the order behind it is decided.
func TestOversizedEntryStaysInRedis(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{O}", "available", 10)
	w := startWorker(t, s, "w0")
	huge := strings.Repeat("x", 200<<20)
	// Sent once: a client that timed out writing 200 MiB on a busy machine would send it again (go-redis
	// retries a timed out command), and two entries would be poisoned.
	once := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer once.Close()
	bigID, err := once.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", huge, "extra", "y"}}).Result()
	huge = ""
	if err != nil {
		t.Fatal(err)
	}
	xaddOrder(t, rdb, "behind", "O", 1)
	waitFor(t, 20*time.Second, "the order behind the huge entry is decided", decided(rdb, "O", "behind"))
	if _, exited := w.exited(0); exited {
		t.Fatal("the worker exited")
	}
	if hwm := peakRSS(t, w.cmd.Process.Pid); hwm >= 100<<20 {
		t.Fatalf("worker peak RSS %d MiB, want under 100 MiB", hwm>>20)
	} else {
		t.Logf("worker peak RSS %.1f MiB", float64(hwm)/(1<<20))
	}
	if n := len(rdb.XRange(ctx, "orders", bigID, bigID).Val()); n != 0 {
		t.Fatal("the oversized entry is still in the orders stream")
	}
	poison, _ := rdb.XRange(ctx, "orders-poison", "-", "+").Result()
	if len(poison) != 1 || poison[0].Values["poison_source_id"] != bigID {
		t.Fatalf("poison stream %v, want the oversized entry", poison)
	}
	v := poison[0].Values
	if v["poison_entry_bytes"] != strconv.Itoa(200<<20+len("payload")+len("extra")+1) || v["poison_field_names"] != "payload,extra" ||
		len(v["poison_prefix"].(string)) != 256 || !strings.Contains(v["poison_reason"].(string), "limit") {
		t.Fatalf("poison entry fields %v", map[string]any{"bytes": v["poison_entry_bytes"], "names": v["poison_field_names"], "reason": v["poison_reason"]})
	}
	noPending(t, rdb)
}

// peakRSS reads VmHWM (the process's peak resident set) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// On SIGTERM a worker hands the entries it read but did not finish within SHUTDOWN_TIMEOUT back to the group
// at once and uncounted: another worker decides them well before CLAIM_IDLE, and each shows one delivery,
// not two.
func TestShutdownHandsBackUnfinishedEntries(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{H}", "available", 10)
	// Three orders in flight, the write held back 10 s, past the leaving worker's SHUTDOWN_TIMEOUT of 1 s
	// (and the Router's 2 s more): cut off by the shutdown, pending for it.
	env := []string{"WORKER_CONCURRENCY=3", "CLAIM_IDLE=30s", "LOCK_WAIT=1s"}
	leaving := terminateHoldingThree(t, s, 10*time.Second, append(env, "FAULT_DELAY_WRITE=10s", "SHUTDOWN_TIMEOUT=1s")...)
	if !strings.Contains(leaving.logText(), "handed back entries read but not finished") {
		t.Fatal("the leaving worker handed nothing back")
	}
	start := time.Now()
	startWorker(t, s, "staying", env...)
	for i := range 3 {
		waitFor(t, 10*time.Second, "the staying worker decides the handed-back orders", decided(rdb, "H", "h-"+strconv.Itoa(i)))
	}
	t.Logf("handed-back orders decided %v after the second worker started (CLAIM_IDLE 30s)", time.Since(start).Round(time.Millisecond))
	if r := rdb.HGet(ctx, "stock:{H}", "reserved").Val(); r != "3" {
		t.Fatalf("reserved %s, want 3", r)
	}
}

// On SIGTERM the orders a worker is deciding finish before it exits, within SHUTDOWN_TIMEOUT: their
// messages' contexts outlive the router's shutdown (stream.SubscriberConfig.Handling). Two of the three
// orders follow the first, whose write is held back 2 s; a follower whose context ended would give up and
// be handed back.
func TestShutdownFinishesTheOrdersInFlight(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{H}", "available", 10)
	leaving := terminateHoldingThree(t, s, 15*time.Second,
		"WORKER_CONCURRENCY=3", "LOCK_WAIT=5s", "CLAIM_IDLE=30s", "FAULT_DELAY_WRITE=2s", "SHUTDOWN_TIMEOUT=8s")
	if p := rdb.XPending(ctx, "orders", "inventory").Val(); p == nil || p.Count != 0 {
		t.Fatalf("pending after the shutdown: %+v, want none\n%s", p, leaving.logText())
	}
	if r := rdb.HGet(ctx, "stock:{H}", "reserved").Val(); r != "3" {
		t.Fatalf("reserved %s, want 3\n%s", r, leaving.logText())
	}
}

// terminateHoldingThree starts worker "leaving" with env, publishes three orders of SKU H, sends it SIGTERM
// once it holds all three, and waits up to exit for it to exit 0.
func terminateHoldingThree(t *testing.T, s *redistest.Server, exit time.Duration, env ...string) *proc {
	t.Helper()
	rdb := s.Client()
	leaving := startWorker(t, s, "leaving", env...)
	for i := range 3 {
		xaddOrder(t, rdb, "h-"+strconv.Itoa(i), "H", 1)
	}
	waitFor(t, 10*time.Second, "the leaving worker holds the three orders", func() bool {
		p := rdb.XPending(context.Background(), "orders", "inventory").Val()
		return p != nil && p.Count == 3
	})
	leaving.signal(syscall.SIGTERM)
	if err, ok := leaving.exited(exit); !ok || err != nil {
		t.Fatalf("worker after SIGTERM: exited %v, %v; want exit 0", ok, err)
	}
	return leaving
}

// A message handled for longer than CLAIM_IDLE makes the worker not ready, and the oldest pending entry's
// age shows on /metrics; both clear once it is done.
func TestStuckMessageShowsInReadyzAndMetrics(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{K}", "available", 10)
	addr := freeAddr(t)
	startWorker(t, s, "w0", "METRICS_ADDR="+addr, "FAULT_DELAY_WRITE=6s", "CLAIM_IDLE=3s", "STREAM_RETENTION=4s")
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })
	xaddOrder(t, rdb, "slow", "K", 1)
	waitFor(t, 6*time.Second, "/readyz reports an order handled for too long", func() bool {
		c, body := readyz(addr)
		return c == http.StatusServiceUnavailable && strings.Contains(body, "an order has been handled for")
	})
	age := func() float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "stockflow_messages_oldest_pending_age_seconds"); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v[strings.LastIndex(v, " "):]), 64)
				return f
			}
		}
		return -1
	}
	if a := age(); a < 2 {
		t.Fatalf("oldest pending age %v on /metrics, want the stuck entry's age (> 2 s)", a)
	}
	waitFor(t, 10*time.Second, "the slow order is decided", decided(rdb, "K", "slow"))
	waitFor(t, 5*time.Second, "the worker is ready again and the age back to 0", func() bool {
		c, _ := readyz(addr)
		return c == 200 && age() == 0
	})
}
