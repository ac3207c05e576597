package worker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
)

// A backlog longer than STREAM_RETENTION is not trimmed: entries the group was never delivered stay,
// although they are older than the retention and nothing is pending. (trim.lua, called as Worker.trim
// calls it: the stream, now - retention as "<ms>-0", the group.)
func TestTrimKeepsEntriesTheGroupWasNeverDelivered(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UnixMilli()
	var ids []string
	for i := range 5 {
		ids = append(ids, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-%d", old, i), Values: []string{"k", "v"}}).Val())
	}
	rdb.XGroupCreate(ctx, "orders", "g", "0")
	got := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}, Count: 2}).Val()
	if len(got) != 1 || len(got[0].Messages) != 2 {
		t.Fatalf("read %v, want the first 2 entries", got)
	}
	rdb.XAck(ctx, "orders", "g", ids[0], ids[1]) // nothing pending; last-delivered-id is ids[1]

	minID := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10) + "-0" // a one-minute retention
	r, err := trimScript.Run(ctx, rdb, []string{"orders"}, minID, "g").Slice()
	if err != nil {
		t.Fatal(err)
	}
	left := rdb.XRange(ctx, "orders", "-", "+").Val()
	if len(left) != 3 || left[0].ID != ids[2] || r[0] != int64(2) {
		t.Fatalf("trimmed %v, left %v; want the 2 delivered entries trimmed and %v kept", r[0], left, ids[2:])
	}
	if b := parseBacklog(r); !b.found || b.pending != 0 || b.lag != 3 {
		t.Fatalf("backlog %+v, want group g found, nothing pending, 3 entries not yet delivered", b)
	}
}
