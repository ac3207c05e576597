package stockctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
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

	var got replayJSON
	wantCode(t, e.runJSON(&got, "poison", "replay", "--id", wm), stockctl.ExitOK)
	if got.Replayed != 1 || got.Skipped != 0 || len(got.Entries) != 1 || got.Entries[0].Result != "replayed" {
		t.Fatalf("replay --id: %+v, want 1 replayed", got)
	}
	orders := e.replayedOrders()
	want := map[string]any{"_watermill_message_uuid": "uuid-o-1", "metadata": `{"traceparent":"00-x"}`,
		"payload": `{"order_id":"o-1","sku":"SKU-7","quantity":0}`, "replayed_from": wm}
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
	lockWait := e.poison("failed 5 times: lock wait", "2-0", "payload", `{"order_id":"o-2","sku":"SKU-1","quantity":1}`)
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

	// Again: nothing left to replay, the refused entry stays.
	wantCode(t, e.runJSON(&got, "poison", "replay", "--all"), stockctl.ExitOK)
	if got.Replayed != 0 || got.Skipped != 1 || len(e.replayedOrders()) != 2 || e.poisonLeft() != 1 {
		t.Fatalf("second --all: %+v, want nothing replayed", got)
	}
	wantContains(t, "text", e.run("poison", "replay", "--id", big).stdout, "skipped  "+big+": not replayable")
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
		wantCode(t, r, stockctl.ExitOK)
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
