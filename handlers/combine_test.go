package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// countingStore counts the batches of a store, and fails them with err when set; before runs before each
// batch with its number (from 1), after after each batch that succeeded; panics panics instead of deciding,
// and so does panicsOn, for a batch that holds the order of that id.
type countingStore struct {
	*inventory.Store
	mu       sync.Mutex
	batches  []int
	err      error
	before   func(batch int)
	after    func()
	panics   bool
	panicsOn string
}

func (s *countingStore) ReserveBatches(ctx context.Context, batches []inventory.Batch) []inventory.BatchResult {
	results := make([]inventory.BatchResult, len(batches))
	for i, b := range batches {
		if b.Basket != nil {
			results[i] = s.Store.ReserveBatches(ctx, batches[i:i+1])[0]
			continue
		}
		results[i].Outcomes, results[i].Err = s.reserveBatch(b.Ctx, b.Orders, b.Fence)
	}
	return results
}

func (s *countingStore) reserveBatch(ctx context.Context, orders []inventory.Order, fence int64) ([]inventory.Outcome, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(orders))
	n := len(s.batches)
	s.mu.Unlock()
	if s.before != nil {
		s.before(n)
	}
	switch {
	case s.panics || slices.ContainsFunc(orders, func(o inventory.Order) bool { return o.ID == s.panicsOn }):
		panic("boom")
	case s.err != nil:
		return nil, s.err
	}
	outs, err := s.Store.ReserveBatch(ctx, orders, fence)
	if err == nil && s.after != nil {
		s.after()
	}
	return outs, err
}

// combineEnv is a handler on a Redis of its own: orders of SKU-1 (5 in stock) delivered to the group g of
// the stream orders, decided through a countingStore, outcomes to the stream results.
type combineEnv struct {
	rdb   *redis.Client
	store *countingStore
	h     *Handler
	b     *lockmw.Batcher
	// gate holds every leader before it decides (as a lock wait would) until closed; nil: none.
	gate chan struct{}
	// elide runs leaders in an elided section first, then (on ErrLocked) in a section with token 0, as the
	// lock middleware would with a lock whose tokens are 0.
	elide bool
}

func newCombineEnv(t *testing.T, maxWait time.Duration) *combineEnv {
	rdb := redistest.Start(t).Client()
	if err := rdb.XGroupCreateMkStream(context.Background(), "orders", "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	e := &combineEnv{rdb: rdb, gate: make(chan struct{})}
	inv := inventory.New(e.rdb)
	if err := inv.SetStock(context.Background(), "SKU-1", 5); err != nil {
		t.Fatal(err)
	}
	e.store = &countingStore{Store: inv}
	e.b = &lockmw.Batcher{MaxWait: maxWait}
	e.h = New(Config{Store: e.store, Outcomes: newOutcomes(t, rdb, "g", "c1"), ResultsTopic: "results", Worker: "w", Batcher: e.b})
	return e
}

// handler is the chain from the Batcher on: a leader leads in its section (inSection). As the router would, it
// acks the entry of an order whose handler returned nil.
func (e *combineEnv) handler() message.HandlerFunc {
	chain := e.b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return e.inSection(msg, handlerFunc(e.h))
	})
	return func(msg *message.Message) ([]*message.Message, error) {
		msgs, err := chain(msg)
		if err == nil {
			err = e.rdb.XAck(context.Background(), "orders", "g", redisstream.EntryID(msg)).Err()
		}
		return msgs, err
	}
}

// handlerFunc is h.Handle as the Router's middlewares see it (message.AddConsumerHandler adapts it so).
func handlerFunc(h *Handler) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h.Handle(msg) }
}

// inSection runs h as the lock middleware would: elided first when e.elide, then, after waiting at the
// gate (as for the lock), with a token of 0.
func (e *combineEnv) inSection(msg *message.Message, h message.HandlerFunc) ([]*message.Message, error) {
	orig := msg.Context()
	defer msg.SetContext(orig)
	if e.elide {
		msg.SetContext(withSection(orig, lockmw.PathElided))
		if msgs, err := h(msg); !errors.Is(err, lockmw.ErrLocked) {
			return msgs, err
		}
	}
	<-e.gate
	msg.SetContext(withSection(orig, lockmw.PathAcquired))
	return h(msg)
}

// order delivers an order of SKU-1 (id) as the decode step leaves it.
func (e *combineEnv) order(t *testing.T, id string) *message.Message {
	t.Helper()
	ctx := context.Background()
	entry := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "p"}}).Val()
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"orders", ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	msg := redisstream.Entry{ID: entry, Stream: "orders", Deliveries: 1, Values: map[string]any{"payload": "p"}}.Message()
	msg.SetContext(lockmw.WithKeys(order.NewContext(ctx, order.Order{OrderID: id, SKU: "SKU-1", Quantity: 1}), []string{"SKU-1"}, lockmw.MayBatch))
	return msg
}

func (e *combineEnv) pending(t *testing.T) []redis.XPendingExt {
	t.Helper()
	p, err := e.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run handles msgs one after the other joining, in the background; it returns their errors, in order,
// once all are handled.
func (e *combineEnv) run(t *testing.T, msgs ...*message.Message) func() []error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	h := e.handler()
	for i, msg := range msgs {
		wg.Go(func() { _, errs[i] = h(msg) })
		e.waitWaiting(t, i+1)
	}
	return func() []error { wg.Wait(); return errs }
}

// waitWaiting waits until n orders of SKU-1 wait in the Batcher.
func (e *combineEnv) waitWaiting(t *testing.T, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		got := e.b.Waiting("SKU-1")
		if got >= n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d orders waiting, want %d", got, n)
		}
	}
}

// results returns the outcome events published, by order id.
func (e *combineEnv) results(t *testing.T) map[string]order.Result {
	out := map[string]order.Result{}
	for _, m := range e.rdb.XRange(context.Background(), "results", "-", "+").Val() {
		var r order.Result
		if err := json.Unmarshal([]byte(m.Values["payload"].(string)), &r); err != nil {
			t.Fatal(err)
		}
		out[r.OrderID] = r
	}
	return out
}

// Orders of a SKU that arrive while its leader waits for the lock are decided in one batch, in arrival
// order, each with its own outcome event, and all acked in the same round trip.
func TestWaitingOrdersAreDecidedInOneBatch(t *testing.T) {
	e := newCombineEnv(t, 0)
	var msgs []*message.Message
	for i := range 8 {
		msgs = append(msgs, e.order(t, fmt.Sprintf("o-%d", i)))
	}
	wait := e.run(t, msgs...)
	close(e.gate)
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	if len(e.store.batches) != 1 || e.store.batches[0] != 8 {
		t.Fatalf("batches %v, want one of 8 orders", e.store.batches)
	}
	results := e.results(t)
	for i := range 8 {
		r := results[fmt.Sprintf("o-%d", i)]
		if want := i < 5; (r.Status == order.StatusReserved) != want {
			t.Fatalf("o-%d: %s, want reserved %v (5 in stock, decided in arrival order)", i, r.Status, want)
		}
	}
	if p := e.pending(t); len(p) != 0 {
		t.Fatalf("%d entries pending, want all acked", len(p))
	}
}

// A batch that fails decides nothing: every order of it gets the error, nothing is published or acked.
func TestFailedBatchLeavesEveryOrderPending(t *testing.T) {
	e := newCombineEnv(t, 0)
	e.store.err = errors.New("redis down")
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	for i, err := range wait() {
		if !errors.Is(err, e.store.err) {
			t.Fatalf("order %d: %v, want the batch's error", i, err)
		}
	}
	if p, r := e.pending(t), e.results(t); len(p) != 3 || len(r) != 0 {
		t.Fatalf("%d pending, %d outcomes; want 3 pending and none published", len(p), len(r))
	}
}

// A follower waits no longer than the lock wait: it gives up as a lock acquisition would, and its leader
// decides without it.
func TestFollowerGivesUpAfterTheLockWait(t *testing.T) {
	e := newCombineEnv(t, 100*time.Millisecond)
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"))
	time.Sleep(300 * time.Millisecond)
	close(e.gate)
	errs := wait()
	if errs[0] != nil || !errors.Is(errs[1], rlock.ErrNotObtained) {
		t.Fatalf("leader %v, follower %v; want the follower to give up with ErrNotObtained", errs[0], errs[1])
	}
	if r := e.results(t); len(r) != 1 || len(e.store.batches) != 1 || e.store.batches[0] != 1 {
		t.Fatalf("outcomes %v, batches %v; want the leader's order alone", r, e.store.batches)
	}
}

// A leader that cannot take the lock hands the lead to the oldest waiting order, which decides the rest.
func TestLeaderThatFailsHandsTheLeadOn(t *testing.T) {
	e := newCombineEnv(t, 0)
	lockErr := errors.New("lock SKU-1: not obtained")
	first := true
	h := e.b.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if first { // only the first leader runs here at this point
			<-e.gate
			first = false
			return nil, lockErr
		}
		return e.inSection(msg, handlerFunc(e.h))
	})
	msgs := []*message.Message{e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3")}
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		wg.Go(func() { _, errs[i] = h(msg) })
		e.waitWaiting(t, i+1)
	}
	close(e.gate)
	wg.Wait()
	if !errors.Is(errs[0], lockErr) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v; want the first leader's lock error and the others decided", errs)
	}
	if r := e.results(t); len(r) != 2 || r["o-1"].OrderID != "" {
		t.Fatalf("outcomes %v, want o-2 and o-3 only", r)
	}
}

// A Redis that refuses the outcome events (out of memory) must not ack their entries: the XADDs and the
// XACK go in one MULTI, which a command refused while queued aborts as a whole.
func TestOutcomesRefusedLeaveTheEntriesPending(t *testing.T) {
	e := newCombineEnv(t, 0)
	ctx := context.Background()
	e.store.after = func() { e.rdb.ConfigSet(ctx, "maxmemory", "1") } // full, right after the stock write
	t.Cleanup(func() { e.rdb.ConfigSet(ctx, "maxmemory", "0") })
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	for i, err := range wait() {
		if err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("order %d: %v, want the refusal of its outcome", i, err)
		}
	}
	e.rdb.ConfigSet(ctx, "maxmemory", "0")
	if p, r := e.pending(t), e.results(t); len(p) != 3 || len(r) != 0 {
		t.Fatalf("%d pending, %d outcomes; want all 3 pending (not acked) and none published", len(p), len(r))
	}
}

// A batch whose decision panics for every order fails each of them with ErrPanicked, the leader's too: none
// waits for its outcome forever, and each retry counts towards MAX_ATTEMPTS.
func TestAPanicFailsEveryOrderOfItsBatch(t *testing.T) {
	e := newCombineEnv(t, 0)
	e.store.panics = true
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	for i, err := range wait() {
		if !errors.Is(err, ErrPanicked) {
			t.Errorf("order %d: %v, want ErrPanicked (the committer recovers the panic)", i+1, err)
		}
	}
}

// One order whose decision panics fails its batch with ErrPanicked; the batch is then decided one order at
// a time, so only that order fails (and counts an attempt) and the others get their outcomes.
func TestAPanicOfOneOrderFailsThatOrderAlone(t *testing.T) {
	e := newCombineEnv(t, 0)
	e.store.panicsOn = "o-2"
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	errs := wait()
	if errs[0] != nil || !errors.Is(errs[1], ErrPanicked) || errs[2] != nil {
		t.Fatalf("errors %v; want only o-2's, ErrPanicked", errs)
	}
	if r := e.results(t); len(r) != 2 || r["o-1"].Status != order.StatusReserved || r["o-3"].Status != order.StatusReserved {
		t.Fatalf("outcomes %v; want o-1 and o-3 reserved", r)
	}
}

// One order whose recorded outcome is corrupt fails a batch permanently; the batch is then decided one
// order at a time, so only that order fails and the others get their outcomes.
func TestBatchThatFailsPermanentlyIsDecidedOrderByOrder(t *testing.T) {
	e := newCombineEnv(t, 0)
	if err := e.rdb.Set(context.Background(), "order:{SKU-1}:o-2", "not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	errs := wait()
	if errs[0] != nil || errs[1] == nil || !inventory.IsPermanent(errs[1]) || errs[2] != nil {
		t.Fatalf("errors %v; want only o-2's, permanent", errs)
	}
	if r := e.results(t); len(r) != 2 || r["o-1"].Status != order.StatusReserved || r["o-3"].Status != order.StatusReserved {
		t.Fatalf("outcomes %v; want o-1 and o-3 reserved", r)
	}
	if p := e.pending(t); len(p) != 1 || !slices.Equal(e.store.batches, []int{3, 1, 1, 1}) {
		t.Fatalf("%d pending, batches %v; want o-2 alone pending after a batch of 3 and three of 1", len(p), e.store.batches)
	}
}

// With lock elision a leader first decides its batch taking the lock inside the stock script; when the
// lock is held (here a Redisson-layout holder), the batch decides nothing, goes back to the head of the
// queue, and the leader goes on to the lock step, whose batch then takes every waiting order.
func TestElidedBatchThatFindsTheLockHeldGoesBackToTheQueue(t *testing.T) {
	e := newCombineEnv(t, 0)
	e.store.Store = inventory.New(e.rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, 0))
	e.elide = true
	e.rdb.HSet(context.Background(), rlock.LockKey("SKU-1"), "someone:1", 1)
	h, msgs, errs := e.handler(), []*message.Message{e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3")}, make([]error, 3)
	var wg sync.WaitGroup
	e.store.before = func(batch int) {
		if batch == 1 { // the leader's elided batch, taken alone: the others join now, before it is refused
			for i := 1; i < 3; i++ {
				wg.Go(func() { _, errs[i] = h(msgs[i]) })
			}
			e.waitWaiting(t, 2)
		}
	}
	close(e.gate)
	_, errs[0] = h(msgs[0])
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v", errs)
	}
	if r := e.results(t); len(r) != 3 || r["o-1"].Fence != 0 || r["o-3"].Status != order.StatusReserved {
		t.Fatalf("outcomes %v; want all three reserved under the lock step's token (0 here)", r)
	}
	if !slices.Equal(e.store.batches, []int{1, 3}) {
		t.Fatalf("batches %v; want the leader's elided batch of 1 (refused: locked), then one of 3 under the lock", e.store.batches)
	}
}

// A follower that gives up while an elided batch holds its order gets its error when the batch comes back
// undecided (the lock was taken meanwhile), instead of going back to the queue to wait again.
func TestFollowerThatGaveUpDuringAnElidedBatchGetsItsError(t *testing.T) {
	e := newCombineEnv(t, 100*time.Millisecond)
	e.store.Store = inventory.New(e.rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, 0))
	e.elide, e.h.leadFor = true, time.Minute
	h := e.handler()
	leader, follower := e.order(t, "o-1"), e.order(t, "o-2")
	followerErr := make(chan error, 1)
	e.store.before = func(batch int) {
		switch batch {
		case 1: // the leader's batch: the follower joins meanwhile
			go func() { _, err := h(follower); followerErr <- err }()
			e.waitWaiting(t, 1)
		case 2: // the follower's batch: it gives up, and another process takes the lock
			time.Sleep(300 * time.Millisecond)
			e.rdb.HSet(context.Background(), rlock.LockKey("SKU-1"), "someone:1", 1)
		}
	}
	if _, err := h(leader); err != nil {
		t.Fatalf("leader: %v", err)
	}
	select {
	case err := <-followerErr:
		if !errors.Is(err, lockmw.ErrGaveUp) {
			t.Fatalf("follower: %v, want lockmw.ErrGaveUp", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower that gave up waits again after its batch came back undecided")
	}
	if r := e.results(t); len(r) != 1 || r["o-1"].Status != order.StatusReserved {
		t.Fatalf("outcomes %v; want o-1 reserved only", r)
	}
	if !slices.Equal(e.store.batches, []int{1, 1}) {
		t.Fatalf("batches %v; want the leader's and the follower's, one order each", e.store.batches)
	}
}

// withSection is ctx in a section of SKU-1 on path, without a lease (token 0), as the lock middleware
// would put it.
func withSection(ctx context.Context, path lockmw.Path) context.Context {
	return lockmw.WithSection(ctx, &lockmw.Section{Keys: []string{"SKU-1"}, Path: path})
}

// A batch that found the lock held goes back to the head of its SKU's queue, ahead of the orders that
// joined while it was out: with scarce stock, the orders are still decided in arrival order.
func TestABatchThatFoundTheLockHeldKeepsItsPlaceInTheQueue(t *testing.T) {
	e := newCombineEnv(t, 0)
	ctx := context.Background()
	e.store.Store = inventory.New(e.rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, 0))
	if err := e.store.Store.SetStock(ctx, "SKU-1", 2); err != nil {
		t.Fatal(err)
	}
	e.elide = true
	close(e.gate)
	e.rdb.HSet(ctx, rlock.LockKey("SKU-1"), "someone:1", 1) // the leader's elided batch is refused
	h := e.handler()
	leader, later := e.order(t, "o-1"), []*message.Message{e.order(t, "o-2"), e.order(t, "o-3")}
	errs := make(chan error, len(later))
	e.store.before = func(batch int) {
		if batch == 1 { // the leader's elided batch is out: two more orders join meanwhile
			for i, msg := range later {
				go func() { _, err := h(msg); errs <- err }()
				e.waitWaiting(t, i+1)
			}
		}
	}
	if _, err := h(leader); err != nil {
		t.Fatalf("leader: %v", err)
	}
	for range later {
		if err := <-errs; err != nil {
			t.Fatalf("follower: %v", err)
		}
	}
	r := e.results(t)
	if r["o-1"].Status != order.StatusReserved || r["o-2"].Status != order.StatusReserved || r["o-3"].Status != order.StatusRejected {
		t.Fatalf("o-1 %s, o-2 %s, o-3 %s; want the first two reserved and o-3 rejected (2 in stock, arrival order)",
			r["o-1"].Status, r["o-2"].Status, r["o-3"].Status)
	}
	if !slices.Equal(e.store.batches, []int{1, 3}) {
		t.Fatalf("batches %v; want the leader's elided batch of 1 (refused: locked), then one of 3", e.store.batches)
	}
}

// A panic in a later batch of a lead (the leader's own order decided and acked in its first) does not go
// up the leader's chain, which would poison the leader's entry: the lead ends, and the later batch's orders
// get ErrPanicked, a failure that counts towards MAX_ATTEMPTS.
func TestAPanicInALaterBatchDoesNotPoisonTheLeader(t *testing.T) {
	e := newCombineEnv(t, 0)
	close(e.gate)
	h := e.handler()
	leader, later := e.order(t, "o-1"), e.order(t, "o-2")
	laterErr := make(chan error, 1)
	e.store.before = func(batch int) {
		switch batch {
		case 1: // the leader's batch: another order joins meanwhile
			go func() { _, err := h(later); laterErr <- err }()
			e.waitWaiting(t, 1)
		case 2:
			panic("boom")
		}
	}
	e.h.leadFor = time.Minute
	if _, err := h(leader); err != nil {
		t.Fatalf("leader: %v, want its own order's outcome (nil)", err)
	}
	if err := <-laterErr; !errors.Is(err, ErrPanicked) {
		t.Fatalf("the later order: %v, want ErrPanicked", err)
	}
	if r := e.results(t); len(r) != 1 || r["o-1"].Status != order.StatusReserved {
		t.Fatalf("outcomes %v; want o-1 reserved only", r)
	}
}

// More orders of one SKU waiting than a stock script takes are decided in batches of at most
// inventory.MaxBatch: the script's keys and arguments are bounded, whatever the queue.
func TestABatchHoldsAtMostMaxBatchOrders(t *testing.T) {
	e := newCombineEnv(t, 0)
	var msgs []*message.Message
	for i := range inventory.MaxBatch + 6 {
		msgs = append(msgs, e.order(t, fmt.Sprintf("o-%d", i)))
	}
	wait := e.run(t, msgs...)
	close(e.gate)
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	for _, n := range e.store.batches {
		if n > inventory.MaxBatch {
			t.Fatalf("batches %v: one holds more than MaxBatch (%d) orders", e.store.batches, inventory.MaxBatch)
		}
	}
}

// A batch decided one order at a time (it failed permanently) gives its leader the leader's own outcome,
// not the last order's: here the last order's record is corrupt and the leader's order is reserved.
func TestALeaderDecidedOneByOneGetsItsOwnOutcome(t *testing.T) {
	e := newCombineEnv(t, 0)
	if err := e.rdb.Set(context.Background(), "order:{SKU-1}:o-3", "not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wait := e.run(t, e.order(t, "o-1"), e.order(t, "o-2"), e.order(t, "o-3"))
	close(e.gate)
	if errs := wait(); errs[0] != nil || errs[1] != nil || !inventory.IsPermanent(errs[2]) {
		t.Fatalf("errors %v; want only o-3's (the last), permanent, and none for the leader o-1", errs)
	}
}

// A single-SKU order that reaches the handler without waiting in the Batcher (a chain built without it)
// fails, and says why, rather than being taken for an order whose lock is held.
func TestAnOrderThatSkippedTheBatcherFailsAndSaysWhy(t *testing.T) {
	e := newCombineEnv(t, 0)
	close(e.gate)
	msg := e.order(t, "o-1")
	if _, err := e.inSection(msg, handlerFunc(e.h)); !errors.Is(err, errNotQueued) || errors.Is(err, lockmw.ErrLocked) {
		t.Fatalf("an order handled without the Batcher: %v, want errNotQueued", err)
	}
	if got := e.results(t); len(got) != 0 {
		t.Fatalf("outcomes %v, want none", got)
	}
}
