package stockctl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stockctl"
)

type poisonListJSON struct {
	Stream  string `json:"stream"`
	Length  int64  `json:"length"`
	Entries []struct {
		ID           string `json:"id"`
		Reason       string `json:"poison_reason"`
		SourceStream string `json:"poison_source_stream"`
		SourceID     string `json:"poison_source_id"`
		OrderID      string `json:"order_id"`
		SKU          string `json:"sku"`
		Replayable   bool   `json:"replayable"`
		EntryBytes   int64  `json:"poison_entry_bytes"`
	} `json:"entries"`
}

// poison adds a poison entry as the worker writes it: the original fields plus the poison_ ones.
func (e *env) poison(reason, sourceID string, original ...any) string {
	e.t.Helper()
	values := append(original, "poison_reason", reason, "poison_source_stream", "orders", "poison_source_id", sourceID)
	return must(e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders-poison", Values: values}).Result())
}

// watermillPoison is a poisoned Watermill entry of order orderID, published a minute ago.
func (e *env) watermillPoison(reason, orderID string) string {
	e.t.Helper()
	return e.poison(reason, agoID(time.Minute), "_watermill_message_uuid", "uuid-"+orderID, "metadata", `{"traceparent":"00-x"}`,
		"payload", `{"order_id":"`+orderID+`","sku":"SKU-7","quantity":0}`)
}

// poisonEntry is the fields of poison entry id.
func (e *env) poisonEntry(id string) map[string]any {
	e.t.Helper()
	msgs := must(e.rdb.XRange(context.Background(), "orders-poison", id, id).Result())
	if len(msgs) != 1 {
		e.t.Fatalf("no poison entry %s", id)
	}
	return msgs[0].Values
}

// agoID is the id of an entry added d ago.
func agoID(d time.Duration) string { return fmt.Sprintf("%d-0", time.Now().Add(-d).UnixMilli()) }

// oversizedPoison is an entry poisoned without its fields, as fetch.lua writes it.
func (e *env) oversizedPoison() string {
	e.t.Helper()
	return e.poison("entry of 90000 bytes is over the limit", "9-0", "poison_entry_bytes", "90000",
		"poison_field_names", "payload,metadata", "poison_prefix", `{"order_id":"big"`)
}

func TestPoisonList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var empty poisonListJSON
	wantCode(t, e.runJSON(&empty, "poison", "list"), stockctl.ExitOK)
	if empty.Length != 0 || len(empty.Entries) != 0 {
		t.Fatalf("no poison stream: %+v, want no entries", empty)
	}

	wm := e.watermillPoison("bad input: quantity 0: want 1-1000000", "o-1")
	plain := e.poison("bad input: payload is not JSON", "2-0", "payload", "not json")
	big := e.oversizedPoison()

	var got poisonListJSON
	wantCode(t, e.runJSON(&got, "poison", "list"), stockctl.ExitOK)
	if got.Length != 3 || len(got.Entries) != 3 {
		t.Fatalf("got %+v, want 3 entries", got)
	}
	b, p, w := got.Entries[0], got.Entries[1], got.Entries[2] // newest first
	if b.ID != big || b.Replayable || b.EntryBytes != 90000 || b.SourceID != "9-0" {
		t.Errorf("oversized entry = %+v, want id %s, not replayable, 90000 bytes", b, big)
	}
	if p.ID != plain || !p.Replayable || p.OrderID != "" || p.Reason != "bad input: payload is not JSON" {
		t.Errorf("plain entry = %+v, want id %s, replayable, no order id (payload is not JSON)", p, plain)
	}
	if w.ID != wm || !w.Replayable || w.OrderID != "o-1" || w.SKU != "SKU-7" || w.SourceID == "" || w.SourceStream != "orders" {
		t.Errorf("watermill entry = %+v, want id %s, order o-1 of SKU-7 from orders", w, wm)
	}

	wantCode(t, e.runJSON(&got, "poison", "list", "--limit", "2"), stockctl.ExitOK)
	if got.Length != 3 || len(got.Entries) != 2 || got.Entries[0].ID != big || got.Entries[1].ID != plain {
		t.Fatalf("--limit 2: %+v, want the 2 newest of 3", got)
	}
	for _, args := range [][]string{{"poison", "list"}, {"poison"}} { // poison without a subcommand lists
		r := e.run(args...)
		wantCode(t, r, stockctl.ExitOK)
		wantContains(t, "poison list output", r.stdout, "3 entries", wm, "o-1", "SKU-7", "quantity 0", "not replayable: 90000 bytes")
	}
}
