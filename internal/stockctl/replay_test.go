package stockctl_test

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/testkit/redistest"
)

type replayJSON struct {
	DryRun      bool `json:"dry_run"`
	Replayed    int  `json:"replayed"`
	WouldReplay int  `json:"would_replay"`
	Skipped     int  `json:"skipped"`
	Entries     []struct {
		ID     string `json:"id"`
		Result string `json:"result"`
		NewID  string `json:"new_id"`
		Reason string `json:"reason"`
	} `json:"entries"`
}

// orders returns the entries of the orders stream by replayed_from.
func (e *env) replayedOrders() map[string]map[string]any {
	e.t.Helper()
	out := map[string]map[string]any{}
	for _, m := range must(e.rdb.XRange(context.Background(), "orders", "-", "+").Result()) {
		from, _ := m.Values["replayed_from"].(string)
		if _, dup := out[from]; dup {
			e.t.Fatalf("poison entry %s was replayed twice", from)
		}
		out[from] = m.Values
	}
	return out
}

func (e *env) poisonLeft() int64 {
	return must(e.rdb.XLen(context.Background(), "orders-poison").Result())
}

func TestReplayByIDKeepsTheOriginalFieldsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wm := e.watermillPoison("bad input", "o-1")
	other := e.watermillPoison("bad input", "o-2")
	source := e.poisonEntry(wm)["poison_source_id"]

	var got replayJSON
	wantCode(t, e.runJSON(&got, "poison", "replay", "--id", wm), stockctl.ExitOK)
	if got.Replayed != 1 || got.Skipped != 0 || len(got.Entries) != 1 || got.Entries[0].Result != "replayed" {
		t.Fatalf("replay --id: %+v, want 1 replayed", got)
	}
	orders := e.replayedOrders()
	want := map[string]any{"_watermill_message_uuid": "uuid-o-1", "metadata": `{"traceparent":"00-x"}`,
		"payload": `{"order_id":"o-1","sku":"SKU-7","quantity":0}`, "replayed_from": wm,
		"replayed_source_id": source}
	if len(orders) != 1 || !maps.Equal(orders[wm], want) {
		t.Fatalf("orders stream = %v, want one entry with exactly %v", orders, want)
	}
	if n := e.poisonLeft(); n != 1 {
		t.Fatalf("%d poison entries left, want 1 (%s)", n, other)
	}

	// The same selection again: the entry is gone, so nothing is replayed, and the named id is not found.
	r := e.runJSON(&got, "poison", "replay", "--id", wm)
	wantCode(t, r, stockctl.ExitNotFound)
	if got.Replayed != 0 || got.Skipped != 1 || got.Entries[0].Result != "missing" || len(e.replayedOrders()) != 1 {
		t.Fatalf("second replay: %+v, %d orders; want nothing replayed", got, len(e.replayedOrders()))
	}
	wantContains(t, "stderr", r.stderr, "no such poison entry: "+wm)
}

func TestReplayByReasonAndAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	quantity := e.watermillPoison("bad input: quantity 0", "o-1")
	lockWait := e.poison("failed 5 times: lock wait", agoID(time.Hour), "payload", `{"order_id":"o-2","sku":"SKU-1","quantity":1}`)
	big := e.oversizedPoison()

	var got replayJSON
	wantCode(t, e.runJSON(&got, "poison", "replay", "--reason-contains", "lock wait"), stockctl.ExitOK)
	if got.Replayed != 1 || got.Entries[0].ID != lockWait {
		t.Fatalf("--reason-contains: %+v, want only %s", got, lockWait)
	}

	r := e.runJSON(&got, "poison", "replay", "--all")
	wantCode(t, r, stockctl.ExitOK)
	if got.Replayed != 1 || got.Skipped != 1 || got.Entries[0].ID != quantity || got.Entries[1].ID != big ||
		got.Entries[1].Result != "refused" || got.Entries[1].Reason != "not replayable: the original entry was not kept" {
		t.Fatalf("--all: %+v, want %s replayed and the oversized %s refused", got, quantity, big)
	}
	orders := e.replayedOrders()
	if len(orders) != 2 || orders[quantity] == nil || orders[lockWait] == nil {
		t.Fatalf("orders stream = %v, want the two replayed entries", orders)
	}
	if n := e.poisonLeft(); n != 1 {
		t.Fatalf("%d poison entries left, want the oversized one", n)
	}

	// Again: nothing left to replay, the refused entry stays; a replay that replays nothing exits 4.
	wantCode(t, e.runJSON(&got, "poison", "replay", "--all"), stockctl.ExitNothingDone)
	if got.Replayed != 0 || got.Skipped != 1 || len(e.replayedOrders()) != 2 || e.poisonLeft() != 1 {
		t.Fatalf("second --all: %+v, want nothing replayed", got)
	}
	r = e.run("poison", "replay", "--id", big)
	wantCode(t, r, stockctl.ExitNothingDone)
	wantContains(t, "text", r.stdout, "skipped  "+big+": not replayable")
	wantContains(t, "stderr", r.stderr, "nothing replayed: 1 selected, 1 skipped")
	wantCode(t, e.run("poison", "replay", "--id", big, "--dry-run"), stockctl.ExitOK) // it showed, as asked
}

func TestReplayDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.watermillPoison("bad input", "o-1")
	big := e.oversizedPoison()
	before := e.snapshot()

	var got replayJSON
	wantCode(t, e.runJSON(&got, "poison", "replay", "--all", "--dry-run"), stockctl.ExitOK)
	if !got.DryRun || got.Replayed != 0 || got.WouldReplay != 1 || got.Skipped != 1 ||
		got.Entries[0].ID != a || got.Entries[0].Result != "would_replay" || got.Entries[1].ID != big {
		t.Fatalf("dry run: %+v, want %s would be replayed and %s refused", got, a, big)
	}
	r := e.run("poison", "replay", "--id", a, "--dry-run")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "dry run output", r.stdout, "would replay  "+a, "nothing was written")
	if after := e.snapshot(); !maps.Equal(before, after) {
		t.Fatalf("dry run changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

func TestReplaySelectionMistakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.watermillPoison("bad input", "o-1")
	before := e.snapshot()
	for _, args := range [][]string{
		{"poison", "replay"},
		{"poison", "replay", "--all", "--reason-contains", "x"},
		{"poison", "replay", "--id", "not-an-id"},
		{"poison", "replay", "--reason-contains", ""},
		{"poison", "replay", "1-0"},
		{"poison", "list", "--all"},
	} {
		if r := e.run(args...); r.code != stockctl.ExitUsage {
			t.Errorf("%q: exit code %d, want %d (stderr %q)", args, r.code, stockctl.ExitUsage, r.stderr)
		}
	}
	if after := e.snapshot(); !maps.Equal(before, after) {
		t.Fatalf("a refused replay changed Redis")
	}
	wantCode(t, e.run("poison", "replay", "--id", "1-0"), stockctl.ExitNotFound)
}

func TestConcurrentReplaysMoveEachEntryOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300
	for i := range n {
		e.watermillPoison("bad input", fmt.Sprintf("o-%d", i))
	}
	var wg sync.WaitGroup
	runs := make([]result, 3)
	for i := range runs {
		wg.Go(func() { runs[i] = e.run("poison", "replay", "--all", "--json") })
	}
	wg.Wait()
	results := make([]replayJSON, len(runs))
	total := 0
	for i, r := range runs {
		if r.code != stockctl.ExitOK && r.code != stockctl.ExitNothingDone { // one may find nothing left
			t.Fatalf("replay %d: exit code %d: %s", i, r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &results[i]); err != nil {
			t.Fatal(err)
		}
		total += results[i].Replayed
	}
	if orders := e.replayedOrders(); total != n || len(orders) != n || e.poisonLeft() != 0 {
		t.Fatalf("replayed %d in total (%d, %d, %d), %d orders, %d poison left; want %d, %d, 0",
			total, results[0].Replayed, results[1].Replayed, results[2].Replayed, len(orders), e.poisonLeft(), n, n)
	}
}

// An entry whose order was first published longer ago than OUTCOME_TTL allows is not replayed: its order's
// outcome records may have expired, and an order poisoned after it reached the stock would be reserved
// again. Its age comes from the oldest source id, also across a replay poisoned again; an entry without one
// is refused too. --force replays them all the same.
func TestReplayRefusesAnOrderOlderThanItsOutcomeRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	order := func(id string) string { return `{"order_id":"` + id + `","sku":"SKU-1","quantity":1}` }
	recent := e.poison("failed", agoID(30*time.Minute), "payload", order("o-1"))
	old := e.poison("failed", agoID(2*time.Hour), "payload", order("o-2"))
	// Published 2 h ago, replayed, poisoned again: poison_source_id is the replay's, young.
	again := e.poison("failed", agoID(time.Minute), "payload", order("o-3"), "replayed_source_id", agoID(2*time.Hour))
	ageless := must(e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders-poison",
		Values: []string{"payload", order("o-4"), "poison_reason", "failed"}}).Result())

	var dry replayJSON
	wantCode(t, e.runJSON(&dry, "poison", "replay", "--all", "--outcome-ttl", "1h", "--dry-run"), stockctl.ExitOK)
	results := map[string]string{}
	for _, en := range dry.Entries {
		results[en.ID] = en.Result
	}
	want := map[string]string{recent: "would_replay", old: "refused", again: "refused", ageless: "refused"}
	if !maps.Equal(results, want) {
		t.Fatalf("dry run: %v, want %v", results, want)
	}
	r := e.run("poison", "replay", "--all", "--outcome-ttl", "1h")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "replay output", r.stdout, "replayed  "+recent, "skipped  "+old+": not replayable without --force: its order was first published 2h0m0s ago",
		"OUTCOME_TTL (1h0m0s)", "skipped  "+ageless+": not replayable without --force: no poison_source_id", "1 replayed")
	if orders := e.replayedOrders(); len(orders) != 1 || orders[recent] == nil || e.poisonLeft() != 3 {
		t.Fatalf("orders stream %v, %d poison left; want only %s replayed", orders, e.poisonLeft(), recent)
	}
	// With the default OUTCOME_TTL (7 days) they are young enough; --force replays the ageless one.
	var got replayJSON
	wantCode(t, e.runJSON(&got, "poison", "replay", "--id", old, "--id", again), stockctl.ExitOK)
	if got.Replayed != 2 || e.replayedOrders()[again]["replayed_source_id"] == nil {
		t.Fatalf("replay with the default OUTCOME_TTL: %+v, want both replayed, the first source id kept", got)
	}
	wantCode(t, e.runJSON(&got, "poison", "replay", "--id", ageless, "--force"), stockctl.ExitOK)
	if got.Replayed != 1 || e.poisonLeft() != 0 {
		t.Fatalf("replay --force: %+v, %d poison left; want it replayed", got, e.poisonLeft())
	}
}

// A replay carries the id its order was first published as, so that the same order poisoned again after
// the replay is as old as it was.
func TestReplayKeepsTheFirstSourceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := agoID(time.Hour)
	id := e.poison("failed", first, "payload", `{"order_id":"o-1","sku":"SKU-1","quantity":1}`)
	wantCode(t, e.run("poison", "replay", "--id", id), stockctl.ExitOK)
	replayed := e.replayedOrders()[id]
	if replayed["replayed_source_id"] != first {
		t.Fatalf("replayed entry %v, want replayed_source_id %s", replayed, first)
	}
	// Poisoned again as the worker does (every field, and its new id as the source), then replayed again.
	values := []any{"poison_reason", "failed again", "poison_source_stream", "orders", "poison_source_id", agoID(0)}
	for k, v := range replayed {
		values = append(values, k, v)
	}
	again := must(e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders-poison", Values: values}).Result())
	wantCode(t, e.run("poison", "replay", "--id", again), stockctl.ExitOK)
	if got := e.replayedOrders()[again]; got["replayed_source_id"] != first || got["replayed_from"] != again {
		t.Fatalf("replayed again: %v, want replayed_source_id %s and replayed_from %s", got, first, again)
	}
}

// A replay whose reply is lost (go-redis sends it again) reports the entry replayed, with the id it got,
// not missing: the resend finds its latch.
func TestAReplayWhoseReplyIsLostReportsItReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.watermillPoison("bad input", "o-1")
	wantCode(t, e.run("poison", "replay", "--id", first), stockctl.ExitOK) // loads the script
	id := e.watermillPoison("bad input", "o-2")
	proxy := redistest.NewReplyDropper(t, e.srv.Addr)
	src, err := os.ReadFile("poison_replay.lua")
	if err != nil {
		t.Fatal(err)
	}
	proxy.DropReplyTo(fmt.Sprintf("%x", sha1.Sum(src)), 1) // the script's EVALSHA

	var got replayJSON
	r := runArgs(t, "--redis-url", "redis://"+proxy.Addr+"/0", "poison", "replay", "--id", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("output is not JSON (%v): %s %s", err, r.stdout, r.stderr)
	}
	wantCode(t, r, stockctl.ExitOK)
	orders := e.replayedOrders()
	if proxy.Dropped() != 1 || got.Replayed != 1 || len(orders) != 2 || orders[id] == nil ||
		got.Entries[0].NewID != must(e.rdb.XRevRangeN(context.Background(), "orders", "+", "-", 1).Result())[0].ID {
		t.Fatalf("replay with its reply lost: %+v, %d orders, %d replies lost; want it replayed once, with its new id",
			got, len(orders), proxy.Dropped())
	}
}
