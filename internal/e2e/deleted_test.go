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
// stockflow_messages_deleted_total, which the StockflowEntriesDeleted alert watches, and logs their ids.
func TestAPendingEntryDeletedByAProducerIsCounted(t *testing.T) {
	s := startACLServer(t)
	admin := s.Client()
	ctx := context.Background()
	// An order delivered to a consumer that died before deciding it: pending.
	if err := admin.XGroupCreateMkStream(ctx, "orders", "inventory", "$").Err(); err != nil {
		t.Fatal(err)
	}
	xaddOrder(t, admin, "lost-1", "SKU-1", 1)
	if err := admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "inventory", Consumer: "dead", Streams: []string{"orders", ">"},
		Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	producerOpts, _ := redis.ParseURL(userURL(t, s, "producer"))
	producer := redis.NewClient(producerOpts)
	defer producer.Close()
	// go-redis's XAddArgs take MaxLen 0 as no cap: the command as a producer in any language would send it.
	if err := producer.Do(ctx, "XADD", "orders", "MAXLEN", "0", "*", "payload", "{}").Err(); err != nil {
		t.Fatalf("XADD MAXLEN 0 as the producer: %v", err)
	}
	if n := admin.XLen(ctx, "orders").Val(); n != 0 || admin.XPending(ctx, "orders", "inventory").Val().Count != 1 {
		t.Fatalf("%d entries in the stream after XADD MAXLEN 0, want none, and the order still pending", n)
	}
	addr := freeAddr(t)
	w := startWorker(t, s, "w0", "REDIS_URL="+userURL(t, s, "worker"), "KEYSPACE_EVENTS=on", "METRICS_ADDR="+addr)
	waitFor(t, 15*time.Second, "stockflow_messages_deleted_total on /metrics", func() bool {
		c, _ := readyz(addr)
		return c == 200 && metricAtLeast(scrapeAll(t, []string{addr}), "stockflow_messages_deleted_total", 1)
	})
	if log := w.logText(); !strings.Contains(log, "deleted from the stream before they were decided") {
		t.Errorf("the worker's log does not report the deleted entry:\n%s", log)
	}
	if n := admin.XPending(ctx, "orders", "inventory").Val().Count; n != 0 {
		t.Errorf("%d entries pending, want the deleted one dropped from the group", n)
	}
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
