package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A backlog longer than STREAM_RETENTION is not trimmed: entries the group was never delivered stay,
// although they are older than the retention and nothing is pending. (trim.lua, called as Worker.trim
// calls it: the stream and its notes, the retention in ms, the group.)
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

	r, err := trimScript.Run(ctx, rdb, trimKeys, time.Minute.Milliseconds(), "g").Slice() // a one-minute retention
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

var trimKeys = []string{"orders", DeliveredTimesKey("orders")}

// A producer's explicit id in the future (the year 2100) gives every later entry of the stream an id in 2100
// too: trimmed by their ids, they would stay for ever. Retention goes by when the entries were delivered
// (trim.lua's notes): once delivered and acked longer than the retention ago, they are trimmed.
func TestTrimDoesNotTrustFutureIDs(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	rdb.XGroupCreateMkStream(ctx, "orders", "g", "0")
	ids := []string{rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: "4102444800000-0", Values: []string{"k", "v"}}).Val()}
	for range 3 {
		ids = append(ids, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"k", "v"}}).Val())
	}
	if ids[3] != "4102444800000-3" {
		t.Fatalf("later ids %v, want them in 2100 too", ids)
	}
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}, Count: 3})
	rdb.XAck(ctx, "orders", "g", ids[:3]...) // the last one not delivered

	const retention = 300 * time.Millisecond
	trim := func() int64 {
		t.Helper()
		r, err := trimScript.Run(ctx, rdb, trimKeys, retention.Milliseconds(), "g").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r[0].(int64)
	}
	if n := trim(); n != 0 {
		t.Fatalf("trimmed %d entries delivered just now, want none", n)
	}
	time.Sleep(retention / 2)
	if n := trim(); n != 0 { // notes the same delivered id again: it keeps its first time
		t.Fatalf("trimmed %d entries delivered half the retention ago, want none", n)
	}
	time.Sleep(retention/2 + 50*time.Millisecond)
	if n := trim(); n != 3 {
		t.Fatalf("trimmed %d entries, want the 3 delivered longer than the retention ago, whatever their ids", n)
	}
	if left := rdb.XRange(ctx, "orders", "-", "+").Val(); len(left) != 1 || left[0].ID != ids[3] {
		t.Fatalf("left %v, want only %s, never delivered", left, ids[3])
	}
	if n := rdb.ZCard(ctx, DeliveredTimesKey("orders")).Val(); n > 2 {
		t.Fatalf("%d notes of delivered ids, want the one in use and the newest", n)
	}
	if ttl := rdb.PTTL(ctx, DeliveredTimesKey("orders")).Val(); ttl <= 0 || ttl > 2*retention {
		t.Fatalf("the notes expire in %v, want within twice the retention", ttl)
	}
}

// Without the worker's own group (lost in a failover to a replica that never had it), nothing is trimmed,
// however old the entries and whatever other groups were delivered: the group created again from the
// replay point must find the orders it had not decided.
func TestTrimTrimsNothingWithoutTheGroup(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 5 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-%d", old, i), Values: []string{"k", "v"}})
	}
	rdb.XGroupCreate(ctx, "orders", "audit", "$") // another group, delivered everything
	r, err := trimScript.Run(ctx, rdb, trimKeys, time.Minute.Milliseconds(), "g").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, "orders").Val(); n != 5 || r[0] != int64(0) {
		t.Fatalf("trimmed %v, %d entries left; want none trimmed without group g", r[0], n)
	}
	if b := parseBacklog(r); b.found {
		t.Fatalf("backlog %+v, want group g not found", b)
	}
}
