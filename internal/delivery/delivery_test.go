package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// chainEnv is one consumer c1 of group g on the stream orders, in a Redis of its own, and an entry
// delivered to it.
type chainEnv struct {
	rdb *redis.Client
	c   *Consumer
}

func newChainEnv(t *testing.T) chainEnv {
	t.Helper()
	rdb := redistest.Start(t).Client()
	if err := rdb.XGroupCreateMkStream(context.Background(), "orders", "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	return chainEnv{rdb: rdb, c: testConsumer(rdb)}
}

// deliver adds an entry and delivers it to c1, as a message that came through the Reader: its metadata says
// its entry id and how many times it was delivered.
func (e chainEnv) deliver(t *testing.T, deliveries int) *message.Message {
	t.Helper()
	ctx := context.Background()
	id := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "p", "extra", "x"}}).Val()
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"orders", ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	msg := redisstream.Entry{ID: id, Deliveries: int64(deliveries), Values: map[string]any{"payload": "p", "extra": "x"}}.Message()
	msg.SetContext(context.Background())
	return msg
}

func (e chainEnv) pending(t *testing.T) []redis.XPendingExt {
	t.Helper()
	p, err := e.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e chainEnv) poisoned(t *testing.T) []redis.XMessage {
	t.Helper()
	return e.rdb.XRange(context.Background(), "orders-poison", "-", "+").Val()
}

// stub is a handler that counts its calls and returns err (or panics with it, if panics).
type stub struct {
	calls  int
	err    error
	panics bool
	ctx    context.Context // the context of the last call
}

func (s *stub) handle(msg *message.Message) ([]*message.Message, error) {
	s.calls++
	s.ctx = msg.Context()
	if s.panics {
		panic(s.err)
	}
	return nil, s.err
}

func TestPoisonSendsWhatCanNeverSucceedAndAcksIt(t *testing.T) {
	cases := []struct {
		name      string
		bad       string // the unmarshaller's bad-entry mark
		stub      stub
		reason    string // "" when the message must pass through
		wantCalls int
	}{
		{"an unreadable entry skips the handler", "entry has no payload", stub{}, "entry has no payload", 0},
		{"bad input", "", stub{err: order.ErrBadInput}, order.ErrBadInput.Error(), 1},
		{"a panic", "", stub{err: errors.New("boom"), panics: true}, "panic: boom", 1},
		{"an order failing too often", "", stub{err: &permanentError{deliveries: 9}}, "delivered 9 times", 1},
		{"a long reason is cut", "", stub{err: fmt.Errorf("%w: sku %q", order.ErrBadInput, strings.Repeat("é", 40000))}, "…", 1},
		{"a transient failure passes through", "", stub{err: errors.New("redis down")}, "", 1},
		{"a success passes through", "", stub{}, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newChainEnv(t)
			msg := e.deliver(t, 1)
			if tc.bad != "" {
				msg.Metadata.Set(redisstream.UnmarshalError, tc.bad)
			}
			_, err := e.c.poison(middleware.Recoverer(tc.stub.handle))(msg)
			if tc.stub.calls != tc.wantCalls {
				t.Fatalf("handler ran %d times, want %d", tc.stub.calls, tc.wantCalls)
			}
			poison := e.poisoned(t)
			if tc.reason == "" {
				if len(poison) != 0 || !errors.Is(err, tc.stub.err) {
					t.Fatalf("poisoned %v, err %v: want nothing poisoned and the handler's error %v", poison, err, tc.stub.err)
				}
				return
			}
			if err != nil || len(poison) != 1 || len(e.pending(t)) != 0 {
				t.Fatalf("err %v, poison %v, pending %v: want one poison entry and the entry acked", err, poison, e.pending(t))
			}
			v := poison[0].Values
			if r := v["poison_reason"].(string); len(r) > maxReason || !utf8.ValidString(r) {
				t.Fatalf("poison reason of %d bytes (valid UTF-8: %v), want at most %d", len(r), utf8.ValidString(r), maxReason)
			}
			if !strings.Contains(v["poison_reason"].(string), tc.reason) || v["poison_source_id"] != redisstream.EntryID(msg) || v["extra"] != "x" {
				t.Fatalf("poison entry %v: want reason %q, the source id and the original fields", v, tc.reason)
			}
		})
	}
}

func TestRetryHandsFailuresBackAndCountsOnlyPermanentOnes(t *testing.T) {
	cases := []struct {
		name       string
		deliveries int // the maximum is 3
		err        error
		wantCalls  int
		wantErr    string // "" for a hand-back (nil error)
		handedBack bool
		counted    bool // the hand-back keeps the delivery in the count
	}{
		{"a transient failure is handed back uncounted", 1, errors.New("redis down"), 1, ErrHandedBack.Error(), true, false},
		{"a permanent failure before the last attempt is handed back counted", 2, inventory.ErrCorrupt, 1, ErrHandedBack.Error(), true, true},
		{"a permanent failure on the last attempt is poisoned", 3, inventory.ErrCorrupt, 1, "failed permanently on attempt 3", false, false},
		{"bad input passes through", 1, order.ErrBadInput, 1, order.ErrBadInput.Error(), false, false},
		{"a delivery over the maximum never runs", 4, nil, 0, "delivered 3 times without an outcome", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newChainEnv(t)
			msg := e.deliver(t, tc.deliveries)
			h := &stub{err: tc.err}
			_, err := e.c.retry(h.handle)(msg)
			if h.calls != tc.wantCalls {
				t.Fatalf("handler ran %d times, want %d", h.calls, tc.wantCalls)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			p := e.pending(t)
			if len(p) != 1 {
				t.Fatalf("pending %v: the entry must stay pending (retry never acks)", p)
			}
			// A hand-back makes the entry look idle for CLAIM_IDLE less about a second.
			if handedBack := p[0].Idle > e.c.claimIdle/2; handedBack != tc.handedBack {
				t.Fatalf("idle %v: handed back %v, want %v", p[0].Idle, handedBack, tc.handedBack)
			}
			if tc.handedBack && (p[0].RetryCount == 1) != tc.counted {
				t.Fatalf("delivery count %d after the hand-back: counted %v, want %v", p[0].RetryCount, p[0].RetryCount == 1, tc.counted)
			}
		})
	}
}

// Too few replica acks is handed back for about 5 s (replicaRetryDelay), other transient failures for about
// 1 s: a shard without a replica would otherwise keep consumers waiting on its orders' WAITs.
func TestReplicaAckFailuresWaitLongerBeforeTheirRetry(t *testing.T) {
	for _, tc := range []struct {
		err      error
		min, max time.Duration // how long before the entry can be claimed
	}{
		{errors.New("redis down"), 700 * time.Millisecond, 1300 * time.Millisecond},
		{fmt.Errorf("reserve: %w", inventory.ErrReplicaAcks), 3900 * time.Millisecond, 6100 * time.Millisecond},
	} {
		e := newChainEnv(t)
		msg := e.deliver(t, 1)
		if _, err := e.c.retry((&stub{err: tc.err}).handle)(msg); !errors.Is(err, ErrHandedBack) {
			t.Fatalf("%v, want ErrHandedBack: the router nacks a handed-back attempt", err)
		}
		p := e.pending(t)
		if left := e.c.claimIdle - p[0].Idle; left < tc.min || left > tc.max {
			t.Errorf("%v: claimable in %v, want %v..%v", tc.err, left, tc.min, tc.max)
		}
	}
}

// keepAlive's resets run beside the handler, which replaces the message's context as it goes (decode,
// combine, the lock): the resets must not read the message meanwhile (Message.SetContext is not safe to
// race with Message.Context; a torn read panicked a worker under load). The race detector checks it, and
// the entry must still be kept from going idle.
func TestKeepAliveDoesNotReadTheMessageWhileTheHandlerRuns(t *testing.T) {
	e := newChainEnv(t)
	e.c.claimIdle = 30 * time.Millisecond // a reset every 10 ms
	msg := e.deliver(t, 1)
	h := e.c.keepAlive(func(msg *message.Message) ([]*message.Message, error) {
		for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
			msg.SetContext(context.WithValue(msg.Context(), struct{}{}, 1))
		}
		return nil, nil
	})
	before := e.pending(t)[0].Idle
	time.Sleep(50 * time.Millisecond)
	if _, err := h(msg); err != nil {
		t.Fatal(err)
	}
	if idle := e.pending(t)[0].Idle; idle >= before+50*time.Millisecond+150*time.Millisecond {
		t.Fatalf("entry idle %v after the handler, want it reset while it ran", idle)
	}
}

// An entry whose handling starts at any moment of the reset loop's period is reset soon enough: its idle
// time stays under half the claim idle time while it is handled (HandBackPending takes an entry idle for
// less than that as being handled). One loop resets all the entries of a consumer; an entry that started
// just after one of its rounds must not wait two periods.
func TestKeepAliveResetsAnEntryThatStartedBetweenRounds(t *testing.T) {
	e := newChainEnv(t)
	e.c.claimIdle = 600 * time.Millisecond
	long := e.deliver(t, 1)
	stop := make(chan struct{})
	longDone := make(chan struct{})
	go func() {
		defer close(longDone)
		_, _ = e.c.keepAlive(func(*message.Message) ([]*message.Message, error) { <-stop; return nil, nil })(long)
	}()
	defer func() { close(stop); <-longDone }()
	var worst time.Duration
	for start := range 6 { // entries starting at different moments of the loop's period
		time.Sleep(time.Duration(start) * 17 * time.Millisecond)
		msg := e.deliver(t, 1)
		_, _ = e.c.keepAlive(func(*message.Message) ([]*message.Message, error) {
			for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				p, err := e.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "orders", Group: "g",
					Start: redisstream.EntryID(msg), End: redisstream.EntryID(msg), Count: 1}).Result()
				if err != nil || len(p) != 1 {
					t.Fatalf("pending %v, %v", p, err)
				}
				worst = max(worst, p[0].Idle)
			}
			return nil, nil
		})(msg)
	}
	if worst >= e.c.claimIdle/2 {
		t.Fatalf("an entry being handled was idle for %v, want under half the claim idle time (%v)", worst, e.c.claimIdle/2)
	}
	t.Logf("longest idle of an entry being handled: %v (claim idle %v)", worst, e.c.claimIdle)
}
