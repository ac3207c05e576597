package delivery

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
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
	"github.com/stockflow/stockflow/testkit/streamtest"
)

// testParts is one partition with the default stream names.
var testParts = []order.Partition{{Orders: "orders", Results: "order-results", Poison: "orders-poison"}}

func testConsumer(rdb redis.UniversalClient) *Consumer {
	return New(Config{Redis: rdb, Partitions: testParts, Group: "g", Name: "c1", PoisonMaxLen: 1000, MaxAttempts: 3,
		ClaimIdle: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// subscribe starts consumer name of group g on testParts (claim idle time claimIdle, claim rounds every
// 10 ms; a lost group is created again from the start); it stops with the test.
func subscribe(t *testing.T, rdb redis.UniversalClient, claimIdle time.Duration, name string) (*redisstream.Subscriber, <-chan *message.Message) {
	t.Helper()
	return streamtest.Subscribe(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: name,
		PoisonTopic: testParts[0].Poison, PoisonMaxLen: 1000, MaxEntryBytes: order.MaxEntryBytes, MaxIdleTime: claimIdle, ClaimInterval: 10 * time.Millisecond,
		NackLeavesPending: true, RecreateFrom: func(time.Time) string { return "0" }})
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want failureKind
	}{
		{"a corrupt stock hash is permanent", fmt.Errorf("reserve: %w", inventory.ErrCorrupt), permanent},
		{"a WRONGTYPE reply is permanent", redisReply("WRONGTYPE Operation against a key holding the wrong kind of value"), permanent},
		{"a script runtime error is permanent", redisReply("ERR user_script:14: Expected value but found invalid token"), permanent},
		{"a decision that panicked is permanent", fmt.Errorf("reserve: %w: boom", handlers.ErrPanicked), permanent},
		{"a stale fence is transient", &inventory.StaleFenceError{Stored: 3}, transient},
		{"a lock wait over is transient", errors.Join(rlock.ErrNotObtained, context.DeadlineExceeded), transient},
		{"a lost lease is transient", rlock.ErrLockLost, transient},
		{"Redis out of memory is transient", redisReply("OOM command not allowed when used memory > 'maxmemory'."), transient},
		{"out of memory inside a script is transient", redisReply("OOM command not allowed when used memory > 'maxmemory'. script: 3f1e, on @user_script:34."), transient},
		{"a read-only replica inside a script is transient", redisReply("READONLY You can't write against a read only replica. script: 3f1e, on @user_script:1."), transient},
		{"WRONGTYPE inside a script is permanent", redisReply("WRONGTYPE Operation against a key holding the wrong kind of value script: 3f1e, on @user_script:20."), permanent},
		{"missing replicas are transient", redisReply("NOREPLICAS Not enough good replicas to write."), transient},
		{"a generic ERR reply is transient", redisReply("ERR max number of clients reached"), transient},
		{"a refused connection is transient", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// redisReply is an error reply of Redis, as go-redis returns it (a redis.Error).
func redisReply(msg string) error {
	return replyErr{msg}
}

type replyErr struct{ msg string }

func (e replyErr) Error() string { return e.msg }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr{}

func TestFetchAndReclaim(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := testConsumer(rdb)
	c1, msgs := subscribe(t, rdb, 30*time.Second, "c1")

	rdb.Del(ctx, "orders") // Redis lost its data: the stream and its group are gone
	if got := streamtest.Receive(t, msgs, 300*time.Millisecond); got != nil || rdb.Exists(ctx, "orders").Val() != 0 {
		t.Fatalf("read without a stream: %v; want nothing, and no stream created (nothing to lose yet)", got)
	}
	small := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "small"}}).Val()
	big := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", strings.Repeat("x", order.MaxEntryBytes)}}).Val()
	after := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "after"}}).Val()
	// The first read finds no group and creates it again.
	if got := streamtest.Receive(t, msgs, 5*time.Second); got == nil || got.UUID != small || redisstream.Deliveries(got) != 1 {
		t.Fatalf("first message %v, want %s delivered once", got, small)
	}
	if groups := rdb.XInfoGroups(ctx, "orders").Val(); len(groups) != 1 || groups[0].Name != "g" {
		t.Fatalf("groups %v after a read found none, want g created again", groups)
	}
	if got := streamtest.Receive(t, msgs, 5*time.Second); got == nil || got.UUID != after {
		t.Fatalf("second message %v, want %s: the oversized entry %s is skipped", got, after, big)
	}
	if rdb.XLen(ctx, "orders-poison").Val() != 1 || len(rdb.XRange(ctx, "orders", big, big).Val()) != 0 {
		t.Fatal("the oversized entry was not moved to the poison stream")
	}
	_ = c1.Close() // c1's own claims would take back what it hands back

	// A transient failure hands the entry back uncounted, idle enough to be claimed after 1 s.
	if err := s.reclaim(ctx, testParts[0], small, 29*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	c2, msgs2 := subscribe(t, rdb, 30*time.Second, "c2")
	if got := streamtest.Receive(t, msgs2, 700*time.Millisecond); got != nil {
		t.Fatalf("claimed %s before the retry delay passed", got.UUID)
	}
	if got := streamtest.Receive(t, msgs2, 5*time.Second); got == nil || got.UUID != small || redisstream.Deliveries(got) != 1 {
		t.Fatalf("claim after the delay: %v, want %s with 1 delivery (the handed-back one not counted)", got, small)
	}
	_ = c2.Close()
	// A permanent failure counts: the next claim sees 2 deliveries. c1 no longer owns it: nothing happens.
	if err := s.reclaim(ctx, testParts[0], small, 0, 0); err != nil {
		t.Fatal(err)
	}
	if p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: small, End: small, Count: 1}).Val(); p[0].Consumer != "c2" {
		t.Fatalf("entry owned by %s after c1's reclaim, want c2 (a consumer must not take back what it lost)", p[0].Consumer)
	}
	s2 := testConsumer(rdb)
	s2.name = "c2"
	if err := s2.reclaim(ctx, testParts[0], small, 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	_, msgs3 := subscribe(t, rdb, 30*time.Second, "c3")
	if got := streamtest.Receive(t, msgs3, 5*time.Second); got == nil || got.UUID != small || redisstream.Deliveries(got) != 2 {
		t.Fatalf("claim after a counted hand-back: %v, want %s with 2 deliveries", got, small)
	}
}

func TestPoisonReasonNamesTheCause(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("decode: %w", order.ErrBadInput), "bad input"},
		{&permanentError{err: inventory.ErrCorrupt, deliveries: 3}, "failed permanently on attempt 3"},
		{&permanentError{deliveries: 5}, "delivered 5 times without an outcome"},
		{fmt.Errorf("handle: %w", middleware.RecoveredPanicError{V: "boom"}), "panic: boom"},
	}
	for _, tc := range cases {
		if reason, _ := poisonReason(tc.err); !strings.Contains(reason, tc.want) {
			t.Errorf("poisonReason(%v) = %q, want %q", tc.err, reason, tc.want)
		}
	}
	if reason, _ := poisonReason(rlock.ErrLockLost); reason != "" {
		t.Errorf("a lost lock poisons (%q): it must be retried", reason)
	}
}
