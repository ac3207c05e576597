package stockctl_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/stockctl"
)

type pruneJSON struct {
	DryRun      bool `json:"dry_run"`
	Deleted     int  `json:"deleted"`
	WouldDelete int  `json:"would_delete"`
	Kept        int  `json:"kept"`
	Consumers   []struct {
		Name    string `json:"name"`
		Pending int64  `json:"pending"`
		Action  string `json:"action"`
		Reason  string `json:"reason"`
	} `json:"consumers"`
}

func (p pruneJSON) actions() map[string]string {
	out := map[string]string{}
	for _, c := range p.Consumers {
		out[c.Name] = c.Action
	}
	return out
}

func (e *env) consumerNames() []string {
	e.t.Helper()
	var names []string
	for _, c := range must(e.rdb.XInfoConsumers(context.Background(), "orders", "inventory").Result()) {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

func TestConsumersPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	must(e.rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "0").Result())
	e.order("orders", "o-1")
	e.read("busy", 1) // busy keeps o-1 pending
	must(e.rdb.XGroupCreateConsumer(ctx, "orders", "inventory", "gone").Result())
	time.Sleep(600 * time.Millisecond)
	must(e.rdb.XGroupCreateConsumer(ctx, "orders", "inventory", "recent").Result())

	var dry pruneJSON
	wantCode(t, e.runJSON(&dry, "consumers", "prune", "--idle", "400ms", "--dry-run"), stockctl.ExitOK)
	want := map[string]string{"busy": "kept", "gone": "would_delete", "recent": "kept"}
	if got := dry.actions(); !dry.DryRun || dry.WouldDelete != 1 || !maps.Equal(got, want) {
		t.Fatalf("dry run: %+v, want %v", dry, want)
	}
	if names := e.consumerNames(); !slices.Equal(names, []string{"busy", "gone", "recent"}) {
		t.Fatalf("the dry run deleted consumers: %v left", names)
	}

	var got pruneJSON
	wantCode(t, e.runJSON(&got, "consumers", "prune", "--idle", "400ms"), stockctl.ExitOK)
	want["gone"] = "deleted"
	if a := got.actions(); got.Deleted != 1 || got.Kept != 2 || !maps.Equal(a, want) {
		t.Fatalf("prune: %+v, want %v", got, want)
	}
	if names := e.consumerNames(); !slices.Equal(names, []string{"busy", "recent"}) {
		t.Fatalf("consumers left: %v, want busy and recent", names)
	}

	// However long it has been idle, a consumer with pending entries stays.
	time.Sleep(10 * time.Millisecond)
	r := e.run("consumers", "prune", "--idle", "0s")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "prune output", r.stdout, "busy", "kept (1 pending entries)", "recent", "deleted")
	if names := e.consumerNames(); !slices.Equal(names, []string{"busy"}) {
		t.Fatalf("consumers left: %v, want busy", names)
	}
	if p := must(e.rdb.XPending(ctx, "orders", "inventory").Result()); p.Count != 1 || p.Consumers["busy"] != 1 {
		t.Fatalf("pending = %+v, want o-1 still pending for busy", p)
	}
}

func TestConsumersPruneWithoutGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.order("orders", "o-1")
	r := e.run("consumers", "prune")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stderr", r.stderr, `consumer group "inventory" does not exist`)
}
