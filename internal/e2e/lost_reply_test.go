package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Lost replies are no attempts (issue 47): a worker whose first read reply and four claim replies in a row
// are lost after Redis ran them (go-redis sends each again on a new connection, and gives up on the claim
// after 3 resends) decides both orders, and poisons neither, with MAX_ATTEMPTS=2. The order claimed from a
// dead consumer is handed over with 2 deliveries (the dead consumer's and this worker's), not 6; the read one
// with 1, at once. /metrics shows both lost replies, and the log says so.
func TestLostReadAndClaimRepliesPoisonNothing(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{A}", "available", 5)
	rdb.HSet(ctx, "stock:{C}", "available", 5)
	if err := rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "$").Err(); err != nil {
		t.Fatal(err)
	}
	// Order a, delivered to a consumer that died: pending, and idle past CLAIM_IDLE when the worker starts.
	xaddOrder(t, rdb, "a", "A", 1)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "dead", Streams: []string{"orders", ">"}, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	xaddOrder(t, rdb, "c", "C", 1) // order c: not delivered yet
	// The reads and claims run: a first call that Redis refuses for want of the script runs nothing.
	fetch, err := os.ReadFile("../../redisstream/fetch.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := redis.NewScript(string(fetch)).Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)

	proxy := redistest.NewReplyDropper(t, s.Addr)
	proxy.DropReplyTo("$5\r\nclaim\r\n", 4) // the first claim and go-redis's 3 resends
	proxy.DropReplyTo("$4\r\nread\r\n", 1)
	addr := freeAddr(t)
	w := startWorker(t, s, "w0", "REDIS_URL=redis://"+proxy.Addr+"/0", "CLAIM_IDLE=2s", "LOCK_WAIT=500ms",
		"MAX_ATTEMPTS=2", "METRICS_ADDR="+addr)
	waitFor(t, 15*time.Second, "both orders are decided", func() bool {
		return decided(rdb, "A", "a")() && decided(rdb, "C", "c")()
	})
	for _, sku := range []string{"A", "C"} {
		if r := rdb.HGet(ctx, "stock:{"+sku+"}", "reserved").Val(); r != "1" {
			t.Errorf("SKU %s: reserved %q, want 1", sku, r)
		}
	}
	if n := rdb.XLen(ctx, "orders-poison").Val(); n != 0 {
		t.Errorf("%d orders poisoned, want none: lost replies are no attempts", n)
	}
	if proxy.Dropped() != 5 {
		t.Errorf("%d replies dropped, want 5", proxy.Dropped())
	}
	waitFor(t, 10*time.Second, "the lost read and the lost claim on /metrics", func() bool {
		body := scrapeAll(t, []string{addr})
		return sampleAtLeast(body, "stockflow_stream_lost_replies_total", `op="read"`, 1) &&
			sampleAtLeast(body, "stockflow_stream_lost_replies_total", `op="claim"`, 1)
	})
	if log := w.logText(); !strings.Contains(log, "the reply of a read was lost") || !strings.Contains(log, "the reply of a claim was lost") {
		t.Errorf("the worker's log does not report the lost replies:\n%s", log)
	}
}

// sampleAtLeast reports whether a sample of the metric name with label (`key="value"`) in the text
// exposition body is >= want.
func sampleAtLeast(body, name, label string, want float64) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) && metricAtLeast(line, name, want) {
			return true
		}
	}
	return false
}
