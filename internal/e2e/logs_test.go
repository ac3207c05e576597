package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// Every line the worker writes is one JSON object, also while its Redis is down and restarts: go-redis's own
// lines (a pool that cannot dial) are records of the worker's log, not plain text in the same stream.
func TestEveryLineTheWorkerWritesDuringARedisRestartIsJSON(t *testing.T) {
	s := redistest.Start(t, redistest.WithPersistence())
	rdb, ctx := s.Client(), context.Background()
	w := startWorker(t, s, "logs")
	rdb.HSet(ctx, "stock:{L}", "available", 10, "reserved", 0)
	xaddOrder(t, rdb, "before", "L", 1)
	waitFor(t, 10*time.Second, "the order before the restart is decided", decided(rdb, "L", "before"))
	s.Kill()
	time.Sleep(2 * time.Second) // the worker's reads, claims and probes fail meanwhile
	s.Restart()
	xaddOrder(t, s.Client(), "after", "L", 1)
	waitFor(t, 20*time.Second, "the order after the restart is decided", decided(s.Client(), "L", "after"))

	lines, redisLines := 0, 0
	for line := range strings.Lines(w.logText()) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		lines++
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not a JSON object: %q", line)
		}
		if rec["component"] == "go-redis" {
			redisLines++
		}
	}
	t.Logf("%d lines, all JSON; %d of them from go-redis", lines, redisLines)
	if redisLines == 0 {
		t.Fatal("no go-redis line while Redis was down: the test did not exercise go-redis's logger")
	}
}
