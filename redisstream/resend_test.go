package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A read whose reply is lost after Redis ran it (fetch.lua handed the entries to this consumer; go-redis sends
// it again on a new connection) hands the same entries over again, at once and delivered once: the resent call
// finds its request id in what the first one noted. It is logged. (Before, the resent read found nothing new,
// and the entries waited, pending and unseen, until a claim round took them as a second delivery.)
func TestALostReadReplyHandsTheSameEntriesOverAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	lossy := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = lossy.Close() })
	for i := range 5 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", fmt.Sprint(i)}})
	}
	proxy.DropReplyTo("$4\r\nread\r\n", 1) // the first read of fetch.lua (a claim's mode is "claim")
	var log syncBuffer
	msgs := subscribe(t, newTestSubscriber(t, lossy, parts, func(c *readerConfig) {
		c.ClaimIdle = time.Minute // no claim can be what hands them over
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	}))
	got := map[string]int{}
	for len(got) < 5 {
		msg := receive(t, msgs)
		got[string(msg.Payload)]++
		if d := Deliveries(msg); d != 1 {
			t.Errorf("entry %s (%s) delivered with %d deliveries, want 1: a lost reply is no delivery", msg.UUID, msg.Payload, d)
		}
		done(t, rdb, msg)
	}
	if proxy.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Dropped())
	}
	noMore(t, msgs)
	if !strings.Contains(log.String(), "the reply of a read was lost") {
		t.Errorf("the lost read is not logged:\n%s", log.String())
	}
}

// A claim whose replies are all lost (go-redis sends it again 3 times, then gives up) costs no delivery
// either: the next claim round makes the same call again (its request id), which hands the claimed entry
// over as the first claim counted it, at once rather than after another claim idle time. So lost replies
// never poison an order: an entry delivered once to a consumer that died comes with 2 deliveries, not 6.
// The same with ShouldClaim, whose next round finds no idle entry to choose (the lost claim took it) and
// makes the call again all the same: it never waits for the entry to be idle again, its own, and chosen.
func TestLostClaimRepliesCountNoDelivery(t *testing.T) {
	for _, chosen := range []bool{false, true} {
		t.Run(fmt.Sprintf("ShouldClaim=%t", chosen), func(t *testing.T) { testLostClaimReplies(t, chosen) })
	}
}

func testLostClaimReplies(t *testing.T, chosen bool) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{"payload", "p"}}).Val()
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{parts[0].Orders, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	// ClaimIdle 1.2 s: the read's note of what a claim handed over lives half of it (600 ms), the time the
	// call made again has to reach Redis after the first, through 4 lost replies and reconnections.
	const claimIdle = 1200 * time.Millisecond
	time.Sleep(claimIdle + 50*time.Millisecond) // idle past ClaimIdle
	// Loaded: else the first claims are refused (NOSCRIPT) and run nothing.
	if err := fetchScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	lossy := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: 3})
	t.Cleanup(func() { _ = lossy.Close() })
	proxy.DropReplyTo("$5\r\nclaim\r\n", 4) // the first call and go-redis's 3 resends
	var log syncBuffer
	msgs := subscribe(t, newTestSubscriber(t, lossy, parts, func(c *readerConfig) {
		c.ClaimIdle, c.ClaimInterval = claimIdle, 20*time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
		if chosen {
			c.ShouldClaim = func(p redis.XPendingExt) bool {
				if p.Consumer == c.Consumer {
					t.Errorf("asked about %s, idle again with this consumer after the lost claim: the call was not made again at once", p.ID)
				}
				return true
			}
		}
	}))
	msg := receive(t, msgs)
	if msg.UUID != id || Deliveries(msg) != 2 {
		t.Fatalf("handed over %s with %d deliveries, want %s with 2 (the dead consumer's and this one's)", msg.UUID, Deliveries(msg), id)
	}
	if proxy.Dropped() != 4 {
		t.Fatalf("%d replies dropped, want 4", proxy.Dropped())
	}
	if p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: parts[0].Orders, Group: "g", Start: id, End: id, Count: 1}).Val(); len(p) != 1 || p[0].RetryCount != 2 {
		t.Fatalf("pending %+v, want the entry delivered twice", p)
	}
	done(t, rdb, msg)
	noMore(t, msgs)
	if !strings.Contains(log.String(), "the reply of a claim was lost") {
		t.Errorf("the lost claim is not logged:\n%s", log.String())
	}
}

// noMore fails the test if msgs hands over another message within half a second.
func noMore(t *testing.T, msgs <-chan *message.Message) {
	t.Helper()
	select {
	case msg := <-msgs:
		t.Errorf("entry %s (%s) handed over again after every entry was acked", msg.UUID, msg.Payload)
	case <-time.After(500 * time.Millisecond):
	}
}
