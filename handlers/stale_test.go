package handlers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// A round that stalled between deciding its orders and publishing them (a pause past CLAIM_IDLE, a cut
// network) while another consumer claimed an entry of it publishes nothing for that order and fails it with
// ErrClaimed, so that the router nacks rather than acks it (an ack would take the entry from the claimer):
// the claimer settles it, with the recorded outcome and whatever came since (a cancel), so the results
// stream never shows this round's stale outcome after a newer one. Its other orders are published as usual.
func TestAStaleRoundPublishesNothingForAnEntryClaimedMeanwhile(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	e.store.gate = make(chan struct{})
	claimed, kept := e.batch(t, "SKU-A", 0), e.batch(t, "SKU-B", 1)
	errs := make(chan error, 2)
	for i, b := range [][]*queued{claimed, kept} {
		go func() { _, err := e.h.committer.decide(&commit{ctx: ctx, batch: b, fence: 0}); errs <- err }()
		if i == 0 { // the first round holds the claimed order alone: the other comes once it is at the gate
			for deadline := time.Now().Add(5 * time.Second); e.store.roundsSeen() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					close(e.store.gate)
					t.Fatal("the first round did not reach the store within 5 s")
				}
			}
		}
	}
	waitWaiting(t, e, 1)
	// The round is stalled in its stock scripts; another consumer claims SKU-A's entry, as after CLAIM_IDLE.
	if err := e.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: e.parts[0].Orders, Group: "g", Consumer: "other",
		Messages: []string{redisstream.EntryID(claimed[0].msg)}}).Err(); err != nil {
		t.Fatal(err)
	}
	close(e.store.gate)
	var failed []error
	for range 2 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) != 1 || !errors.Is(failed[0], ErrClaimed) || !errors.Is(failed[0], redisstream.ErrLeftPending) {
		t.Fatalf("round errors %v, want ErrClaimed for the order claimed meanwhile alone (nacked: the claimer's to settle)", failed)
	}
	got := e.outcomes(t)
	if _, ok := got[claimed[0].order.OrderID]; ok {
		t.Errorf("the stale round published the outcome of an order another consumer claimed meanwhile")
	}
	if _, ok := got[kept[0].order.OrderID]; !ok {
		t.Errorf("the round's other order got no outcome")
	}
	if p := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: e.parts[0].Orders, Group: "g", Start: "-", End: "+", Count: 10}).Val(); len(p) != 1 || p[0].Consumer != "other" {
		t.Errorf("pending %+v, want the claimed entry still the claimer's", p)
	}
}

// A commit whose reply is lost is sent again by go-redis; the second call finds the first one's note and
// publishes nothing more: one outcome event per order.
func TestACommitsLostReplyPublishesEachOutcomeOnce(t *testing.T) {
	e := newRoundEnv(t)
	ctx := context.Background()
	dropper := redistest.NewReplyDropper(t, e.rdb.Options().Addr)
	opts := *e.rdb.Options()
	opts.Addr = dropper.Addr
	client := redis.NewClient(&opts)
	defer client.Close()
	e.h.cfg.Outcomes = newOutcomes(t, client, "g", "c")
	batch := e.batch(t, "SKU-A", 0, 0)
	if _, err := e.h.committer.decide(&commit{ctx: ctx, batch: e.batch(t, "SKU-C", 1), fence: 0}); err != nil { // the scripts are known
		t.Fatal(err)
	}
	dropper.DropReplyTo(e.parts[0].Results, 1) // the commit call names the results stream
	if _, err := e.h.committer.decide(&commit{ctx: ctx, batch: batch, fence: 0}); err != nil {
		t.Fatal(err)
	}
	if dropper.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want the commit's", dropper.Dropped())
	}
	if n := e.rdb.XLen(ctx, e.parts[0].Results).Val(); n != 2 {
		t.Errorf("%d outcome events for 2 orders after a lost commit reply, want 2", n)
	}
	if n := e.pending(t); n != 0 {
		t.Errorf("%d orders without an outcome, want none", n)
	}
}

// In a batch of two orders of one SKU whose round stalled while another consumer claimed one order's
// entry, only that order fails with ErrClaimed (its entry the claimer's); the other is published and acked,
// not handed back to be decided and published again.
func TestAClaimedOrderFailsAloneInItsBatch(t *testing.T) {
	e := newCombineEnv(t, 0)
	ctx := context.Background()
	leader, other := e.order(t, "o-1"), e.order(t, "o-2")
	e.store.before = func(int) { // the round stalls; meanwhile another consumer claims o-2's entry
		e.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "orders", Group: "g", Consumer: "other", Messages: []string{redisstream.EntryID(other)}})
	}
	wait := e.run(t, leader, other)
	close(e.gate)
	errs := wait()
	if errs[0] != nil || !errors.Is(errs[1], ErrClaimed) {
		t.Fatalf("errors %v; want o-1 decided and o-2 ErrClaimed alone", errs)
	}
	if r := e.results(t); len(r) != 1 || r["o-1"].Status == "" {
		t.Errorf("outcomes %v; want o-1's alone", r)
	}
	if p := e.pending(t); len(p) != 1 || p[0].Consumer != "other" {
		t.Errorf("pending %+v; want o-2's entry alone, the claimer's (o-1's acked)", p)
	}
}
