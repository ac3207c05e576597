package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// What ACLs cannot stop: a producer's XADD with MAXLEN 0 deletes every entry of the stream, a pending one
// too. The worker notices at its next claim round (the claim reports the deleted ids) and counts them in
// stockflow_messages_deleted_total, which the StockflowEntriesDeleted alert watches.
func TestAPendingEntryDeletedByAProducerIsCounted(t *testing.T) {
	s := startACLServer(t)
	admin := s.Client()
	ctx := context.Background()
	addr := freeAddr(t)
	startWorker(t, s, "w0", "REDIS_URL="+userURL(t, s, "worker"), "KEYSPACE_EVENTS=on", "METRICS_ADDR="+addr,
		"CLAIM_IDLE=3s", "LOCK_WAIT=1s")
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })
	// An order delivered to a consumer that died before deciding it: pending, and claimed once idle.
	xaddOrder(t, admin, "lost-1", "SKU-1", 1)
	if err := admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "dead", Streams: []string{"orders", ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	producerOpts, _ := redis.ParseURL(userURL(t, s, "producer"))
	producer := redis.NewClient(producerOpts)
	defer producer.Close()
	if err := producer.XAdd(ctx, &redis.XAddArgs{Stream: "orders", MaxLen: 0, Values: []string{"payload", "{}"}}).Err(); err != nil {
		t.Fatalf("XADD MAXLEN 0 as the producer: %v", err)
	}
	waitFor(t, 15*time.Second, "stockflow_messages_deleted_total on /metrics", func() bool {
		return metricAtLeast(scrapeAll(t, []string{addr}), "stockflow_messages_deleted_total", 1)
	})
}

// metricAtLeast reports whether a sample of the counter name in the text exposition body is >= want.
func metricAtLeast(body, name string, want float64) bool {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		var v float64
		fields := strings.Fields(line)
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil && v >= want {
			return true
		}
	}
	return false
}
