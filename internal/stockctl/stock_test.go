package stockctl_test

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/testkit/redistest"
)

type stockJSON struct {
	SKUs []struct {
		SKU       string `json:"sku"`
		Found     bool   `json:"found"`
		Available int64  `json:"available"`
		Reserved  int64  `json:"reserved"`
		Fence     int64  `json:"fence"`
	} `json:"skus"`
	More bool `json:"more"`
}

func TestStockSetAddAndShow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	r := e.run("stock", "set", "SKU-1", "10")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "stock set output", r.stdout, "SKU-1", "10")
	if got := must(e.rdb.HGet(ctx, "stock:{SKU-1}", "available").Result()); got != "10" {
		t.Fatalf("after stock set, available = %s, want 10", got)
	}

	var added stockJSON
	wantCode(t, e.runJSON(&added, "stock", "add", "SKU-1", "5"), stockctl.ExitOK)
	if len(added.SKUs) != 1 || added.SKUs[0].Available != 15 {
		t.Fatalf("stock add 5 reported %+v, want available 15", added)
	}

	// A reservation shows in reserved and fence.
	if _, err := inventory.New(e.rdb).Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 4}, 7); err != nil {
		t.Fatal(err)
	}
	var got stockJSON
	wantCode(t, e.runJSON(&got, "stock", "SKU-1"), stockctl.ExitOK)
	s := got.SKUs[0]
	if !s.Found || s.SKU != "SKU-1" || s.Available != 11 || s.Reserved != 4 || s.Fence != 7 {
		t.Fatalf("stock SKU-1 = %+v, want found, available 11, reserved 4, fence 7", s)
	}
	text := e.run("stock", "get", "SKU-1").stdout
	wantContains(t, "stock get output", text, "AVAILABLE", "RESERVED", "FENCE", "SKU-1  11")
}

func TestStockUnknownSKUIsReportedWithExit3(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantCode(t, e.run("stock", "set", "SKU-1", "3"), stockctl.ExitOK)

	r := e.run("stock", "SKU-1", "NOPE")
	wantCode(t, r, stockctl.ExitNotFound)
	wantContains(t, "stdout", r.stdout, "SKU-1  3", "NOPE: unknown SKU")
	wantContains(t, "stderr", r.stderr, "NOPE")

	var got stockJSON
	wantCode(t, e.runJSON(&got, "stock", "SKU-1", "NOPE"), stockctl.ExitNotFound)
	if len(got.SKUs) != 2 || !got.SKUs[0].Found || got.SKUs[1].Found || got.SKUs[1].SKU != "NOPE" {
		t.Fatalf("JSON = %+v, want SKU-1 found and NOPE not found", got)
	}
}

func TestStockBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantCode(t, e.run("stock", "set", "FULL", "1000000000000000"), stockctl.ExitOK) // at MaxStock
	before := e.snapshot()
	cases := []struct {
		name string
		args []string
		says string // the message names the bad argument
	}{
		{"a number that is not one", []string{"stock", "set", "SKU-1", "ten"}, `invalid N "ten"`},
		{"a negative stock, taken for a flag", []string{"stock", "set", "SKU-1", "-1"}, "'1' in -1"},
		{"a negative stock", []string{"stock", "set", "SKU-1", "--", "-1"}, "available -1"},
		{"a stock over the maximum", []string{"stock", "set", "SKU-1", "1000000000000001"}, "available 1000000000000001"},
		{"a SKU with a brace", []string{"stock", "set", "SKU{1}", "5"}, `sku "SKU{1}"`},
		{"a missing N", []string{"stock", "set", "SKU-1"}, "stock set wants SKU N"},
		{"a zero restock", []string{"stock", "add", "SKU-1", "0"}, "quantity 0"},
		{"a restock past the maximum", []string{"stock", "add", "FULL", "1"}, "would exceed"},
		{"a bad SKU among good ones", []string{"stock", "SKU-1", "bad sku"}, `sku "bad sku"`},
		{"no SKU", []string{"stock", "get"}, "at least one SKU"},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		if r.code != stockctl.ExitUsage {
			t.Errorf("%s: exit code %d, want %d (stderr %q)", c.name, r.code, stockctl.ExitUsage, r.stderr)
		}
		wantContains(t, c.name+": stderr", r.stderr, c.says)
	}
	if after := e.snapshot(); !maps.Equal(before, after) {
		t.Fatalf("bad input changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

// A stock write whose reply is lost (go-redis resends it) is applied once, and stockctl reports what Redis
// holds: stock add 50 on 10 available leaves 60 (issue 30).
func TestStockWritesWhoseReplyIsLostApplyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy := redistest.NewReplyDropper(t, e.srv.Addr)
	url := "redis://" + proxy.Addr + "/0"
	// Each script runs once directly first, so the reply lost below is that of a send that ran.
	wantCode(t, e.run("stock", "set", "R1", "10"), stockctl.ExitOK)
	wantCode(t, e.run("stock", "add", "R2", "1"), stockctl.ExitOK)

	proxy.DropReplyTo("stock:{R1}", 1)
	var added stockJSON
	r := runArgs(t, "--redis-url", url, "stock", "add", "R1", "50", "--json")
	wantCode(t, r, stockctl.ExitOK)
	if err := json.Unmarshal([]byte(r.stdout), &added); err != nil || len(added.SKUs) != 1 || added.SKUs[0].Available != 60 {
		t.Fatalf("stock add reported %s (%v), want available 60", r.stdout, err)
	}
	if got := must(e.rdb.HGet(context.Background(), "stock:{R1}", "available").Result()); got != "60" || proxy.Dropped() != 1 {
		t.Fatalf("available %s after stock add 50 on 10 with %d replies lost, want 60 after 1", got, proxy.Dropped())
	}

	proxy.DropReplyTo("stock:{R1}", 1)
	r = runArgs(t, "--redis-url", url, "stock", "set", "R1", "7")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "stock set output", r.stdout, "R1   7 ")
	if got := must(e.rdb.HGet(context.Background(), "stock:{R1}", "available").Result()); got != "7" || proxy.Dropped() != 2 {
		t.Fatalf("available %s after stock set 7 with %d replies lost, want 7 after 2", got, proxy.Dropped())
	}
}

// stock without SKUs lists the SKUs stocked, sorted, at most --limit of them (and says there are more);
// the keys of its write latches are not SKUs.
func TestStockWithoutSKUsListsTheStockedOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, sku := range []string{"B", "A", "C"} {
		wantCode(t, e.run("stock", "set", sku, "5"), stockctl.ExitOK)
	}
	must(e.rdb.Set(context.Background(), "stock:{A}:latch:x", "1", 0).Result())
	var got stockJSON
	wantCode(t, e.runJSON(&got, "stock"), stockctl.ExitOK)
	if len(got.SKUs) != 3 || got.SKUs[0].SKU != "A" || got.SKUs[1].SKU != "B" || got.SKUs[2].SKU != "C" || got.More ||
		got.SKUs[0].Available != 5 {
		t.Fatalf("stock: %+v, want A, B and C with 5 each", got)
	}
	wantCode(t, e.runJSON(&got, "stock", "--limit", "2"), stockctl.ExitOK)
	if len(got.SKUs) != 2 || !got.More {
		t.Fatalf("stock --limit 2: %+v, want 2 SKUs and more", got)
	}
	wantContains(t, "stock --limit 2", e.run("stock", "--limit", "2").stdout, "showing 2 SKUs (--limit); there are more")
}
