package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
	"github.com/stockflow/stockflow/testkit/streamtest"
)

func TestLifetimeSettingsValidate(t *testing.T) {
	cases := []struct {
		name    string
		change  func(*Config)
		setting string
	}{
		{"a retention as long as the outcome TTL is refused", func(c *Config) { c.StreamRetention = c.OutcomeTTL }, "STREAM_RETENTION"},
		{"a zero retention is refused", func(c *Config) { c.StreamRetention = 0 }, "STREAM_RETENTION"},
		{"a group start other than $ or 0 is refused", func(c *Config) { c.GroupStart = "1-0" }, "CONSUMER_GROUP_START"},
		{"zero attempts are refused", func(c *Config) { c.MaxAttempts = 0 }, "MAX_ATTEMPTS"},
		{"a tiny poison bound is refused", func(c *Config) { c.PoisonMaxLen = 10 }, "POISON_MAXLEN"},
		{"an outcome TTL under a minute is refused", func(c *Config) { c.OutcomeTTL = time.Second }, "OUTCOME_TTL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.setting) {
				t.Fatalf("err %v, want one naming %s", err, tc.setting)
			}
		})
	}
}

// testParts is one partition with the default stream names.
var testParts = []order.Partition{{Orders: "orders", Results: "order-results", Poison: "orders-poison"}}

// subscribe starts consumer name of group g on testParts (cfg's CLAIM_IDLE and OUTCOME_TTL, claim rounds
// every 10 ms); it stops with the test.
func subscribe(t *testing.T, rdb redis.UniversalClient, cfg Config, name string) (*redisstream.Subscriber, <-chan *message.Message) {
	t.Helper()
	return streamtest.Subscribe(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: name,
		PoisonTopic: testParts[0].Poison, PoisonMaxLen: 1000, MaxEntryBytes: order.MaxEntryBytes, MaxIdleTime: cfg.ClaimIdle, ClaimInterval: 10 * time.Millisecond,
		NackLeavesPending: true, RecreateFrom: cfg.replayFrom})
}

func TestTrimKeepsWhatAGroupNeeds(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	cfg := validConfig(t)
	cfg.RedisURL = "redis://" + rdb.Options().Addr
	cfg.ConsumerGroup = "g"
	cfg.StreamRetention = time.Second
	w, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Locker: NoLock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	old := time.Now().Add(-time.Hour).UnixMilli()
	var ids []string
	for i := range 6 {
		ids = append(ids, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-%d", old, i), Values: []string{"k", "v"}}).Val())
	}
	fresh := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"k", "v"}}).Val()
	rdb.XGroupCreate(ctx, "orders", "g", "0")
	rdb.XGroupCreate(ctx, "orders", "slow", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"orders", ">"}, Count: 7})
	rdb.XAck(ctx, "orders", "g", ids[0], ids[1], ids[3], ids[4], ids[5], fresh) // ids[2] stays pending in g
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "slow", Consumer: "c", Streams: []string{"orders", ">"}, Count: 4})
	rdb.XAck(ctx, "orders", "slow", ids[0], ids[1], ids[2], ids[3]) // slow has not been given ids[4:]

	if err := w.trim(ctx); err != nil {
		t.Fatal(err)
	}
	left := rdb.XRange(ctx, "orders", "-", "+").Val()
	if len(left) != 5 || left[0].ID != ids[2] {
		t.Fatalf("left %v, want from %s on: pending in g (and ids[4:] not yet delivered to slow)", left, ids[2])
	}
	b := w.backlog.Load()
	if !b.found || b.pending != 1 || b.oldest.UnixMilli() != old {
		t.Fatalf("backlog %+v, want group g with 1 pending entry published an hour ago", b)
	}
	rdb.XAck(ctx, "orders", "g", ids[2])
	rdb.XGroupDestroy(ctx, "orders", "slow")
	if err := w.trim(ctx); err != nil {
		t.Fatal(err)
	}
	if left := rdb.XRange(ctx, "orders", "-", "+").Val(); len(left) != 1 || left[0].ID != fresh {
		t.Fatalf("left %v, want only the entry younger than the retention", left)
	}
}

func TestLostGroupIsNotRecreatedPastTheOutcomeTTL(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	cfg := validConfig(t)
	old := time.Now().Add(-cfg.OutcomeTTL).UnixMilli()
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-0", old), Values: []string{"payload", "expired"}})
	recent := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-0", old+2*time.Minute.Milliseconds()),
		Values: []string{"payload", "recent"}}).Val()
	rdb.XGroupCreate(ctx, "orders", "g", "$")
	_, msgs := subscribe(t, rdb, cfg, "c1")
	rdb.XGroupDestroy(ctx, "orders", "g") // lost: a read finds no group and creates it again
	if got := streamtest.Receive(t, msgs, 5*time.Second); got == nil || got.UUID != recent {
		t.Fatalf("first entry after the group was recreated: %v, want %s (the one older than OUTCOME_TTL skipped)", got, recent)
	}
}

// A Redis Cluster node given as one server (REDIS_CLUSTER false) is refused at startup, with what to set:
// its baskets would fail with CROSSSLOT for ever.
func TestAClusterNodeTakenForOneServerIsRefused(t *testing.T) {
	s := redistest.Start(t, func(o *redisproc.Options) { o.Cluster = true })
	cfg := validConfig(t)
	cfg.RedisURL = s.URL()
	w, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Locker: NoLock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.prepare(ctx); !errors.Is(err, errClusterNode) || !strings.Contains(err.Error(), "REDIS_CLUSTER=true") {
		t.Fatalf("prepare: %v, want errClusterNode saying to set REDIS_CLUSTER=true", err)
	}
}

// A shutdown while the worker waits for Redis says so, not that STARTUP_TIMEOUT ran out: both end the wait
// at once (the timeout's context is ctx's child), and the reason is the shutdown's.
func TestAShutdownWhileWaitingForRedisIsNamed(t *testing.T) {
	cfg := validConfig(t)
	cfg.RedisURL = "redis://" + redistest.ClosedAddr(t) // nothing listens there
	cfg.StartupTimeout = time.Minute
	w, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Locker: NoLock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 20 { // the choice between the two was random: 20 shutdowns all named right
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if err := w.prepare(ctx); err == nil || !strings.Contains(err.Error(), "before shutdown") {
			t.Fatalf("prepare: %v, want the shutdown named", err)
		}
	}
}

// A group that holds trimming back in one partition is warned about once, not at every round because another
// partition has no such group.
func TestAGroupHoldingTrimmingBackIsWarnedAboutOnce(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	cfg := validConfig(t)
	cfg.RedisURL = "redis://" + rdb.Options().Addr
	cfg.ConsumerGroup, cfg.StreamRetention, cfg.OrdersPartitions = "g", time.Second, 2
	var logs strings.Builder
	w, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), Options{Locker: NoLock})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	old := time.Now().Add(-time.Hour).UnixMilli()
	for _, p := range w.parts {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, ID: fmt.Sprintf("%d-0", old), Values: []string{"k", "v"}})
		rdb.XGroupCreate(ctx, p.Orders, "g", "0")
	}
	rdb.XGroupCreate(ctx, w.parts[0].Orders, "slow", "0") // never reads: holds partition 0's old entry
	for range 3 {
		if err := w.trim(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "another consumer group keeps"); n != 1 {
		t.Fatalf("warned %d times in 3 rounds, want once:\n%s", n, logs.String())
	}
}
