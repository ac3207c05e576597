package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Every decided order and lifecycle event records its wait for its SKU(s) once in
// stockflow_lock_wait_seconds, whatever its path (acquired, handed off, elided, batched), with the default
// settings: 3 orders on one SKU show the histogram; then single orders (half on a hot SKU), two-line baskets
// and cancels, decided by two workers, are each counted once.
func TestLockWaitIsRecordedForEveryDecidedOrder(t *testing.T) {
	s := redistest.Start(t)
	rdb, ctx := s.Client(), context.Background()
	addrs := []string{freeAddr(t), freeAddr(t)}
	for i, addr := range addrs {
		startWorker(t, s, fmt.Sprintf("w%d", i), "METRICS_ADDR="+addr, "WORKER_CONCURRENCY=16")
	}
	skus := []string{"ONE", "HOT"}
	for i := range 20 {
		skus = append(skus, fmt.Sprintf("C%d", i))
	}
	for _, sku := range skus {
		rdb.HSet(ctx, "stock:{"+sku+"}", "available", 1000, "reserved", 0)
	}

	for i := range 3 {
		xaddOrder(t, rdb, fmt.Sprintf("one-%d", i), "ONE", 1)
	}
	waitOutcomes(t, rdb, 3)
	if body := scrapeAll(t, addrs); !strings.Contains(body, "stockflow_lock_wait_seconds_bucket") {
		t.Fatalf("3 orders decided, no stockflow_lock_wait_seconds_bucket on /metrics:\n%s", grepLines(body, "stockflow_lock"))
	}

	for i := range 200 {
		sku := "HOT"
		if i%2 == 1 {
			sku = fmt.Sprintf("C%d", i%20)
		}
		xaddOrder(t, rdb, fmt.Sprintf("o-%d", i), sku, 1)
	}
	for i := range 40 {
		xaddPayload(t, rdb, fmt.Sprintf(`{"order_id":"b-%d","lines":[{"sku":"HOT","quantity":1},{"sku":"C%d","quantity":1}]}`, i, i%20))
	}
	waitOutcomes(t, rdb, 3+200+40)
	for i := range 40 {
		xaddPayload(t, rdb, fmt.Sprintf(`{"type":"cancel","order_id":"b-%d","sku":"HOT"}`, i))
	}
	const decided = 3 + 200 + 40 + 40
	waitOutcomes(t, rdb, decided)

	var counted float64
	var body string
	// A wait is recorded just after its outcome was published: the scrape may come first.
	for end := time.Now().Add(3 * time.Second); counted < decided && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		body = scrapeAll(t, addrs)
		counted = sumSamples(body, "stockflow_lock_wait_seconds_count")
	}
	t.Logf("%v of %d decided orders and events counted; by path:\n%s", counted, decided,
		grepLines(body, "stockflow_lock_wait_seconds_count"))
	if counted != decided {
		t.Fatalf("stockflow_lock_wait_seconds counts %v, want %d: one per decided order and event", counted, decided)
	}
}

// xaddPayload adds an order event with payload as a plain entry of the orders stream.
func xaddPayload(t *testing.T, rdb *redis.Client, payload string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders", Values: []string{"payload", payload}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// waitOutcomes waits until the results stream holds n outcome events.
func waitOutcomes(t *testing.T, rdb *redis.Client, n int64) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d outcomes", n), func() bool {
		return rdb.XLen(context.Background(), "order-results").Val() >= n
	})
}

// scrapeAll returns the /metrics pages of the workers at addrs, one after the other.
func scrapeAll(t *testing.T, addrs []string) string {
	t.Helper()
	var b strings.Builder
	for _, addr := range addrs {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		b.Write(body)
	}
	return b.String()
}

// sumSamples adds up every sample of name (all its series) in a Prometheus text page.
func sumSamples(body, name string) float64 {
	total := 0.0
	for line := range strings.Lines(body) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) > 0 {
			v, _ := strconv.ParseFloat(fields[0], 64)
			total += v
		}
	}
	return total
}

// grepLines returns the lines of body that contain s.
func grepLines(body, s string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
