package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// roundEnv is a handler whose store counts the batches of each ReserveBatches call (a round), on a Redis
// of its own with two partitions of orders.
type roundEnv struct {
	rdb       *redis.Client
	parts     []order.Partition
	h         *Handler
	store     *roundStore
	delivered atomic.Int64 // the orders batch delivered
}

type roundStore struct {
	*inventory.Store
	mu     sync.Mutex
	rounds []int
	gate   chan struct{} // the first round waits here until it is closed; nil: none
}

func (s *roundStore) ReserveBatches(ctx context.Context, batches []inventory.Batch) []inventory.BatchResult {
	s.mu.Lock()
	s.rounds = append(s.rounds, len(batches))
	first := len(s.rounds) == 1
	s.mu.Unlock()
	if first && s.gate != nil {
		<-s.gate
	}
	for _, b := range batches {
		if len(b.Orders) > 0 && b.Orders[0].SKU == "SKU-PANIC" {
			panic("boom")
		}
	}
	return s.Store.ReserveBatches(ctx, batches)
}

// roundsSeen is how many rounds the store was asked to reserve, the one at the gate included.
func (s *roundStore) roundsSeen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rounds)
}

func newRoundEnv(t *testing.T) *roundEnv {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	e := &roundEnv{rdb: rdb, parts: order.Partitions(2, false, "orders", "results", "poison")}
	for _, p := range e.parts {
		if err := rdb.XGroupCreateMkStream(ctx, p.Orders, "g", "$").Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.store = &roundStore{Store: inventory.New(rdb, inventory.WithLockElision(rlock.LockKey, rlock.TokenKey, time.Hour))}
	for _, sku := range []string{"SKU-A", "SKU-B", "SKU-C"} {
		if err := e.store.SetStock(ctx, sku, 5); err != nil {
			t.Fatal(err)
		}
	}
	e.h = New(Config{Store: e.store, Outcomes: newOutcomes(t, rdb, "g", "c"), ResultsTopic: "results", Worker: "w"})
	return e
}

// batch delivers one order of sku per partition index given, as entries pending for the group.
func (e *roundEnv) batch(t *testing.T, sku string, partitions ...int) []*queued {
	t.Helper()
	ctx := context.Background()
	var batch []*queued
	for _, i := range partitions {
		p := e.parts[i]
		id := fmt.Sprintf("%s-%d-%d", sku, i, e.delivered.Load())
		entry := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", id}}).Val()
		if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{p.Orders, ">"}}).Err(); err != nil {
			t.Fatal(err)
		}
		msg := redisstream.Entry{ID: entry, Stream: p.Orders, Partition: i, Partitioned: true, Deliveries: 1, Values: map[string]any{"payload": id}}.Message()
		batch = append(batch, &queued{msg: msg, order: order.Order{OrderID: id, SKU: sku, Quantity: 1}})
		e.delivered.Add(1)
	}
	return batch
}

// outcomes are the outcome events of the results streams, by order id.
func (e *roundEnv) outcomes(t *testing.T) map[string]order.Result {
	t.Helper()
	got := map[string]order.Result{}
	for _, p := range e.parts {
		for _, x := range e.rdb.XRange(context.Background(), p.Results, "-", "+").Val() {
			var r order.Result
			if err := json.Unmarshal([]byte(x.Values["payload"].(string)), &r); err != nil {
				t.Fatal(err)
			}
			got[r.OrderID] = r
		}
	}
	return got
}

// pending is how many of the orders delivered have no outcome event: their entries stay pending, for a
// retry (the router acks the others' once the handler returns).
func (e *roundEnv) pending(t *testing.T) int64 {
	t.Helper()
	return e.delivered.Load() - int64(len(e.outcomes(t)))
}

// On one Redis a basket is reserved in a round too, its script in the pipeline with the batches': one
// ReserveBatches for both; its outcome event has its lines and the wait for its locks (not the round's),
// and its entry is acked with the batch's. An elided basket whose lock is held fails with ErrLocked, for
// the lock middleware to take its locks, and its entry stays pending.
func TestARoundReservesABasketWithTheBatches(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	basket := func(q *queued, fences inventory.Fences, lines ...order.Line) *commit {
		q.order = order.Order{OrderID: q.order.OrderID, Lines: lines}
		return &commit{ctx: ctx, batch: []*queued{q}, basket: &inventory.Basket{OrderID: q.order.OrderID, Lines: lines, Fences: fences}}
	}
	// Redis learns the scripts first: with NOSCRIPT every batch is decided alone, outside the pipeline.
	e.h.decideRound(ctx, []*commit{{ctx: ctx, batch: e.batch(t, "SKU-W", 0)}, basket(e.batch(t, "SKU-X", 0)[0], nil, order.Line{SKU: "SKU-W", Quantity: 1}, order.Line{SKU: "SKU-X", Quantity: 1})})
	if n := e.pending(t); n != 0 {
		t.Fatalf("%d entries pending after the first round, want 0", n)
	}
	e.store.rounds = nil

	q := e.batch(t, "SKU-A", 1)[0]
	q.waited = 7 * time.Millisecond
	e.rdb.HSet(ctx, rlock.LockKey("SKU-C"), "someone:1", 1)
	elided := inventory.Fences{"SKU-A": inventory.ElideLock, "SKU-C": inventory.ElideLock}
	round := []*commit{
		{ctx: ctx, batch: e.batch(t, "SKU-B", 0, 0)},
		basket(q, nil, order.Line{SKU: "SKU-B", Quantity: 2}, order.Line{SKU: "SKU-C", Quantity: 1}),
		basket(e.batch(t, "SKU-A", 0)[0], elided, order.Line{SKU: "SKU-A", Quantity: 1}, order.Line{SKU: "SKU-C", Quantity: 1}),
	}
	e.h.decideRound(ctx, round)
	if round[0].err != nil || round[1].err != nil || !errors.Is(round[2].err, inventory.ErrLocked) {
		t.Fatalf("round errors %v, %v, %v; want the last ErrLocked", round[0].err, round[1].err, round[2].err)
	}
	if fmt.Sprint(e.store.rounds) != "[3]" {
		t.Errorf("ReserveBatches calls of %v batches, want one of 3", e.store.rounds)
	}
	r := e.outcomes(t)[q.order.OrderID]
	if r.Status != order.StatusReserved || len(r.Lines) != 2 || r.Lines[0].AvailableAfter != 1 || r.LockWaitMs != 7 {
		t.Errorf("the basket's outcome %+v, want reserved, SKU-B's line after the batch's 2 (1 left), a lock wait of 7 ms", r)
	}
	if n := e.pending(t); n != 1 {
		t.Errorf("%d entries pending after the round, want 1 (the basket refused)", n)
	}
}

// A round decides the batches of several SKUs, read from two partitions, together: one pipeline of stock
// scripts, then one transaction of outcomes and acks. A batch that fails (here a SKU whose stock hash is
// corrupt) fails alone: its entry stays pending for a retry, while the others are decided and acked.
func TestARoundDecidesEachBatchAsAlone(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	e.rdb.HSet(ctx, stock.Key("SKU-BAD"), "available", "many")
	round := []*commit{
		{ctx: ctx, batch: e.batch(t, "SKU-A", 0, 1, 0)},
		{ctx: ctx, batch: e.batch(t, "SKU-BAD", 1)},
		{ctx: ctx, batch: e.batch(t, "SKU-B", 1)},
	}
	e.h.decideRound(ctx, round)
	if round[0].err != nil || round[2].err != nil || round[1].err == nil || !inventory.IsPermanent(round[1].err) {
		t.Fatalf("round errors %v, %v, %v: want only SKU-BAD's batch failed, permanently", round[0].err, round[1].err, round[2].err)
	}
	got := e.outcomes(t)
	for _, b := range []*commit{round[0], round[2]} {
		for _, q := range b.batch {
			if r := got[q.order.OrderID]; r.Status != order.StatusReserved {
				t.Errorf("order %s: outcome %+v, want reserved", q.order.OrderID, r)
			}
		}
	}
	if len(got) != 4 {
		t.Errorf("%d outcomes, want the 4 of SKU-A and SKU-B", len(got))
	}
	if n := e.pending(t); n != 1 {
		t.Errorf("%d entries pending, want 1: SKU-BAD's, for its retry", n)
	}
	if st, _ := e.store.Get(ctx, "SKU-A"); st.Available != 2 {
		t.Errorf("SKU-A available %d after 3 orders of 1, want 2", st.Available)
	}
}

// A round whose commit fails for one partition (here its worker may not write that partition's results
// stream: the call is refused before it runs) fails the batches with an order read from that partition and
// no other (each partition commits in a call of its own): their entries stay
// pending for the retry while the other partitions' are acked with their outcomes.
func TestAFailedPartitionFailsOnlyItsBatches(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	acl := []any{"ACL", "SETUSER", "w", "on", "nopass", "+@all", "~" + e.parts[0].Results}
	for _, p := range e.parts {
		acl = append(acl, "~"+p.Orders, "~"+redisstream.CommittedKey(p.Orders, "g", "c"))
	}
	if err := e.rdb.Do(ctx, acl...).Err(); err != nil {
		t.Fatal(err)
	}
	opts := *e.rdb.Options()
	opts.Username, opts.Password = "w", "any" // nopass: any password
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	e.h.cfg.Outcomes = newOutcomes(t, rdb, "g", "c")
	round := []*commit{
		{ctx: ctx, batch: e.batch(t, "SKU-A", 0, 0)},
		{ctx: ctx, batch: e.batch(t, "SKU-B", 1)},
		{ctx: ctx, batch: e.batch(t, "SKU-C", 0, 1)},
	}
	e.h.decideRound(ctx, round)
	outcomes, okA := len(e.outcomes(t)), round[0].err == nil
	if !okA || round[1].err == nil || round[2].err == nil {
		t.Fatalf("round errors %v, %v, %v: want SKU-B's and SKU-C's batches failed, not SKU-A's",
			round[0].err, round[1].err, round[2].err)
	}
	if !strings.Contains(round[1].err.Error(), "NOPERM") {
		t.Errorf("SKU-B's error %q, want its partition's XADD's NOPERM", round[1].err)
	}
	if failed := e.rdb.XLen(ctx, e.parts[1].Results).Val(); outcomes != 3 || failed != 0 {
		t.Errorf("%d outcomes, %d in the failed partition; want 3 (SKU-A's 2, SKU-C's 1), none there",
			outcomes, failed)
	}
}

// Leaders that come while a round is being committed wait, and go into the next round together, which the
// first of them commits: three batches, one round.
func TestLeadersComingDuringARoundShareTheNext(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	first := e.gatedRound(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, sku := range []string{"SKU-A", "SKU-B", "SKU-C"} {
		batch := e.batch(t, sku, i%2)
		wg.Go(func() { _, errs[i] = e.h.committer.decide(&commit{ctx: ctx, batch: batch, fence: 0}) })
	}
	for e.waiting() < 3 {
		time.Sleep(time.Millisecond)
	}
	close(e.store.gate)
	wg.Wait()
	if err := <-first; err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v %v, want none", err, errs)
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	if want := []int{1, 3}; fmt.Sprint(e.store.rounds) != fmt.Sprint(want) {
		t.Errorf("rounds of %v batches, want %v: the three that came during the first round share the second", e.store.rounds, want)
	}
	if n := e.pending(t); n != 0 {
		t.Errorf("%d entries pending, want every one acked", n)
	}
}

// An order decided already (a basket, a lifecycle event) that comes while a round is being committed
// joins the next round for its outcome event and ack: that round reserves only the batches, and its commit
// publishes and acks them all, one XACK per partition (here 2; the decided order alone would make it 3).
func TestADecidedOrderJoinsTheNextRoundsTransaction(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	first := e.gatedRound(t)
	basket := e.batch(t, "SKU-BASKET", 1)
	result, err := e.h.resultMessage(ctx, order.Result{OrderID: basket[0].order.OrderID, Status: order.StatusReserved})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { errs[0] = e.h.committer.publish(ctx, basket, []*message.Message{result}) })
	for i, sku := range []string{"SKU-B", "SKU-C"} {
		batch := e.batch(t, sku, i)
		wg.Go(func() { _, errs[i+1] = e.h.committer.decide(&commit{ctx: ctx, batch: batch, fence: 0}) })
	}
	waitWaiting(t, e, 3) // the decided order's and the two batches
	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	close(e.store.gate)
	wg.Wait()
	if err := <-first; err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v %v, want none", err, errs)
	}
	e.store.mu.Lock()
	rounds := fmt.Sprint(e.store.rounds)
	e.store.mu.Unlock()
	if rounds != "[1 2]" {
		t.Errorf("rounds reserving %s batches, want [1 2]: the decided order is not reserved again", rounds)
	}
	if r := e.outcomes(t)[basket[0].order.OrderID]; r.Status != order.StatusReserved {
		t.Errorf("the decided order's outcome %+v, want its event published", r)
	}
	if n := e.pending(t); n != 0 {
		t.Errorf("%d entries pending, want every one acked", n)
	}
	if calls := commandCalls(t, e.rdb, "xpending"); calls != 3 {
		t.Errorf("%d commit calls (one XPENDING each) after the stats were reset, want 3: the first round's, and one per partition for the decided order and the two batches", calls)
	}
}

// A round led by an order whose context ended (its lease was lost) still commits the other batches of the
// round: the context is the leader's, the round is everyone's.
func TestARoundOutlivesItsLeadersContext(t *testing.T) {
	e := newRoundEnv(t)
	first := e.gatedRound(t)
	lost, cancel := context.WithCancel(context.Background())
	cancel()
	basket := e.batch(t, "SKU-BASKET", 1)
	result, err := e.h.resultMessage(lost, order.Result{OrderID: basket[0].order.OrderID, Status: order.StatusReserved})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { errs[0] = e.h.committer.publish(lost, basket, []*message.Message{result}) })
	waitWaiting(t, e, 1)
	for i, sku := range []string{"SKU-B", "SKU-C"} {
		batch := e.batch(t, sku, i)
		wg.Go(func() {
			_, errs[i+1] = e.h.committer.decide(&commit{ctx: context.Background(), batch: batch, fence: 0})
		})
	}
	waitWaiting(t, e, 3)
	close(e.store.gate)
	wg.Wait()
	if err := <-first; err != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v %v, want none for the batches of a round whose leader's context ended", err, errs)
	}
	if n := e.pending(t); n != 0 {
		t.Errorf("%d entries pending, want every one acked", n)
	}
}

// waitWaiting waits until n commits wait for the next round.
func waitWaiting(t *testing.T, e *roundEnv, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.waiting() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(e.store.gate)
			t.Fatalf("%d commits waiting for the next round, want %d", e.waiting(), n)
		}
	}
}

// commandCalls is how many times Redis ran command since its statistics were last reset.
func commandCalls(t *testing.T, rdb *redis.Client, command string) int {
	t.Helper()
	stats := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// gatedRound starts a round of one batch of SKU-A that waits in its ReserveBatches until e.store.gate is
// closed, and returns its outcome to come.
func (e *roundEnv) gatedRound(t *testing.T) <-chan error {
	e.store.gate = make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := e.h.committer.decide(&commit{ctx: context.Background(), batch: e.batch(t, "SKU-A", 0), fence: 0})
		first <- err
	}()
	for e.roundCount() == 0 {
		time.Sleep(time.Millisecond)
	}
	return first
}

// fixed is a take that returns batch.

func (e *roundEnv) roundCount() int {
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	return len(e.store.rounds)
}

func (e *roundEnv) waiting() int {
	c := e.h.committer
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// A round that panics is committed again batch by batch: only the batch whose data panics gets
// ErrPanicked; the others are decided.
func TestAPanickingRoundIsCommittedBatchByBatch(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	round := []*commit{{ctx: ctx, batch: e.batch(t, "SKU-A", 0)}, {ctx: ctx, batch: e.batch(t, "SKU-PANIC", 1)}}
	e.h.decideRound(ctx, round)
	if round[0].err != nil || !errors.Is(round[1].err, ErrPanicked) {
		t.Fatalf("errors %v, %v: want SKU-A decided, SKU-PANIC's batch ErrPanicked", round[0].err, round[1].err)
	}
	if r := e.outcomes(t); len(r) != 1 || r["SKU-A-0-0"].Status != order.StatusReserved {
		t.Errorf("outcomes %v, want SKU-A's order reserved alone", r)
	}
}
