package redisstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// The entries a dead consumer left pending are claimed once idle for ClaimIdle, on every partition, with a
// delivery count that counts the claim. One deleted from the stream while pending (a producer's XADD
// MAXLEN, say) is reported: logged with its id, and dropped from the pending list.
func TestSubscriberClaimsIdleEntriesAndReportsDeletedOnes(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	var gone string
	for _, p := range threeParts {
		for range 2 {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}})
		}
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	gone = rdb.XAdd(ctx, &redis.XAddArgs{Stream: threeParts[1].Orders, Values: []string{"payload", "deleted"}}).Val()
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{threeParts[1].Orders, ">"}})
	rdb.XDel(ctx, threeParts[1].Orders, gone)
	var logs syncBuffer
	msgs := subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *readerConfig) {
		c.Consumer, c.ClaimIdle, c.ClaimInterval = "c2", 200*time.Millisecond, 10*time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	claimed := map[string]bool{}
	for len(claimed) < 6 {
		msg := receive(t, msgs)
		p := threeParts[EntryPartition(msg)]
		if Deliveries(msg) != 2 || string(msg.Payload) != p.Orders {
			t.Fatalf("claimed %s of %s with %d deliveries, payload %s; want 2 deliveries", msg.UUID, p.Orders, Deliveries(msg), msg.Payload)
		}
		claimed[p.Orders+"/"+msg.UUID] = true
		done(t, rdb, msg)
	}
	if n := pendingFor(t, rdb, "dead"); n != 0 {
		t.Errorf("%d entries still pending for the dead consumer, want all claimed, the deleted one dropped", n)
	}
	if !strings.Contains(logs.String(), "deleted from the stream before they were decided") || !strings.Contains(logs.String(), gone) {
		t.Errorf("logs %q: want the deleted entry %s reported", logs.String(), gone)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pendingFor counts the entries pending for consumer over the partitions.
func pendingFor(t *testing.T, rdb redis.UniversalClient, consumer string) int {
	t.Helper()
	n := 0
	for _, p := range threeParts {
		pending, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: p.Orders, Group: "g",
			Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += len(pending)
	}
	return n
}

// The consumers of the group that have been idle longer than ConsumerTimeout with nothing pending are
// deleted, on every partition; one with pending entries stays, however idle.
func TestSubscriberPrunesIdleConsumers(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	createGroups(t, rdb, threeParts...)
	for _, p := range threeParts {
		rdb.XGroupCreateConsumer(ctx, p.Orders, "g", "gone")
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", "p"}})
		rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "busy", Streams: []string{p.Orders, ">"}})
	}
	subscribe(t, newTestSubscriber(t, rdb, threeParts, func(c *readerConfig) {
		c.PruneInterval, c.ConsumerTimeout = 20*time.Millisecond, time.Second
	}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, p := range threeParts {
			for _, c := range rdb.XInfoConsumers(ctx, p.Orders, "g").Val() {
				if c.Name != "c1" { // the subscriber itself: Redis before 7.2 lists it only once it read an entry
					left = append(left, fmt.Sprintf("%d/%s", p.Index, c.Name))
				}
			}
		}
		slices.Sort(left)
		if want := []string{"0/busy", "1/busy", "2/busy"}; slices.Equal(left, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers %v after 10 s, want every idle one without pending entries (gone) deleted", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A claim goes on from the cursor the last one returned: Redis scans at most ten times COUNT pending
// entries a call (XAUTOCLAIM), so with 20 entries that are not idle (a live consumer's) ahead of 10 idle
// ones and one place in flight (COUNT 1), claims that started over at 0-0 every round would scan the same
// ten live entries for good and never reach the idle ones.
func TestAClaimGoesOnFromWhereTheLastOneStopped(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	p := threeParts[0]
	createGroups(t, rdb, p)
	var ids []string
	for i := range 30 {
		ids = append(ids, rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", fmt.Sprint(i)}}).Val())
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The first 20 were just delivered to a live consumer; the last 10 were left by a dead one a minute ago.
	busy := []any{"XCLAIM", p.Orders, "g", "busy", 0}
	idle := []any{"XCLAIM", p.Orders, "g", "dead", 0}
	for i, id := range ids {
		if i < 20 {
			busy = append(busy, id)
		} else {
			idle = append(idle, id)
		}
	}
	for _, cmd := range [][]any{append(busy, "JUSTID"), append(idle, "IDLE", 60_000, "JUSTID")} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	msgs := subscribe(t, newTestSubscriber(t, rdb, []partition{p}, func(c *readerConfig) {
		c.MaxInFlight, c.ClaimInterval = 1, 10*time.Millisecond // ClaimIdle 30 s: the live consumer's are not idle
	}))
	var claimed []string
	for range 10 {
		msg := receive(t, msgs)
		claimed = append(claimed, msg.UUID)
		done(t, rdb, msg)
	}
	if !slices.Equal(claimed, ids[20:]) {
		t.Fatalf("claimed %v, want the 10 idle entries %v in order", claimed, ids[20:])
	}
}
