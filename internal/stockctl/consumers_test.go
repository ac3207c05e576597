package stockctl_test

import (
	"context"
	"maps"
	"slices"
	"strings"
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

	// A prune that deletes nothing did nothing it was asked to: exit 4, with its report; a dry run did.
	r = e.run("consumers", "prune", "--idle", "0s")
	wantCode(t, r, stockctl.ExitNothingDone)
	wantContains(t, "prune output", r.stdout, "busy")
	wantContains(t, "prune stderr", r.stderr, "no consumer deleted: 1 kept")
	wantCode(t, e.run("consumers", "prune", "--idle", "0s", "--dry-run"), stockctl.ExitOK)
}

// consumers without a subcommand lists the consumers of the group: -o wide adds the time since each one
// last read something.
func TestConsumersListsTheGroupsConsumers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	must(e.rdb.XGroupCreateMkStream(ctx, "orders", "inventory", "0").Result())
	e.order("orders", "o-1")
	e.read("busy", 1)
	must(e.rdb.XGroupCreateConsumer(ctx, "orders", "inventory", "idle").Result())

	var got struct {
		Group     string `json:"group"`
		Consumers []struct {
			Name    string `json:"name"`
			Pending int64  `json:"pending"`
		} `json:"consumers"`
	}
	wantCode(t, e.runJSON(&got, "consumers"), stockctl.ExitOK)
	if got.Group != "inventory" || len(got.Consumers) != 2 || got.Consumers[0].Name != "busy" || got.Consumers[0].Pending != 1 ||
		got.Consumers[1].Name != "idle" {
		t.Fatalf("consumers: %+v, want busy with 1 pending and idle", got)
	}
	text, wide := e.run("consumers"), e.run("consumers", "-o", "wide")
	wantContains(t, "consumers", text.stdout, "CONSUMER", "busy", "idle")
	wantContains(t, "consumers -o wide", wide.stdout, "INACTIVE", "busy", "idle")
	if strings.Contains(text.stdout, "INACTIVE") {
		t.Errorf("consumers shows the wide column:\n%s", text.stdout)
	}
	wantCode(t, e.run("consumers", "--orders-stream", "nope"), stockctl.ExitNotFound)
}

func TestConsumersPruneWithoutGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.order("orders", "o-1")
	r := e.run("consumers", "prune")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stderr", r.stderr, `consumer group "inventory" does not exist`)
}
