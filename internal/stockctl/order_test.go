package stockctl_test

import (
	"context"
	"testing"

	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
)

// stockctl order answers "what happened to order X?" from its outcome record: a reserved order's status
// and quantity, a basket's lines from any of its SKUs, and a non-zero exit for an order nobody decided.
func TestOrderShowsTheRecordedOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	store := inventory.New(e.rdb)
	for _, sku := range []string{"SKU-1", "A", "B"} {
		if err := store.SetStock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Reserve(ctx, inventory.Order{ID: "ord-42", SKU: "SKU-1", Quantity: 2}, 7); err != nil {
		t.Fatal(err)
	}
	lines := []order.Line{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 3}}
	if _, err := store.ReserveLines(ctx, "b-1", lines, nil); err != nil {
		t.Fatal(err)
	}

	r := e.run("order", "ord-42", "--sku", "SKU-1")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "order output", r.stdout, "reserved", "quantity 2", "fence 7")

	r = e.run("order", "b-1", "--sku", "B")
	wantCode(t, r, stockctl.ExitOK)
	wantContains(t, "basket order output", r.stdout, "reserved", "A x1", "B x3")

	var rec map[string]any
	wantCode(t, e.runJSON(&rec, "order", "ord-42", "--sku", "SKU-1"), stockctl.ExitOK)
	ttl := inventory.DefaultOutcomeTTL.Milliseconds()
	if ms, _ := rec["expires_in_ms"].(float64); rec["status"] != "reserved" || rec["quantity"] != 2.0 || ms <= 0 || ms > float64(ttl) {
		t.Fatalf("order --json: %v, want reserved, quantity 2, expires_in_ms in (0, %d]", rec, ttl)
	}
	if _, ok := rec["expires_in"]; ok {
		t.Fatalf("order --json has expires_in, a duration in nanoseconds: %v", rec)
	}

	wantCode(t, e.run("order", "ord-43", "--sku", "SKU-1"), stockctl.ExitNotFound)
	wantCode(t, e.run("order", "ord-42"), stockctl.ExitUsage)
}
