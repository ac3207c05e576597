package inventory

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/order"
)

// A reply of another shape than reserve_batch.lua's is an error, never a zero Outcome. (Internal test:
// a real script cannot be made to reply wrongly; the batch tests cover the right shape.)
func TestDecodeOutcomesRefusesAReplyOfTheWrongShape(t *testing.T) {
	orders := []Order{{ID: "o-1", SKU: "S", Quantity: 1}, {ID: "o-2", SKU: "S", Quantity: 1}}
	good := `0{"status":"reserved","reason":"","quantity":1,"available_after":4,"fence":0}`
	for _, tc := range []struct {
		name  string
		reply string
		msg   string
	}{
		{"one outcome short", good, "for a batch of 2 orders"},
		{"one outcome more", good + "\n" + good + "\n" + good, "for a batch of 2 orders"},
		{"no replayed mark", good + "\n" + good[1:], `for order "o-2"`},
		{"a record that is not JSON", good + "\n0OK", `for order "o-2"`},
		{"a record without a status", good + "\n0{\"quantity\":1}", `for order "o-2"`},
		{"a field of another type", good + "\n" + strings.Replace(good, `"quantity":1`, `"quantity":"1"`, 1), `for order "o-2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := decodeOutcomes(orders, tc.reply)
			if err == nil || outs != nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, %v; want an error containing %q", outs, err, tc.msg)
			}
		})
	}
	replayed := `1{"fence":3,"status":"cancelled","reason":"","quantity":1,"available_after":4,"lines":[]}`
	outs, err := decodeOutcomes(orders, good+"\n"+replayed)
	if err != nil || outs[0] != (Outcome{OrderID: "o-1", SKU: "S", Quantity: 1, Status: order.StatusReserved, AvailableAfter: 4}) ||
		outs[1] != (Outcome{OrderID: "o-2", SKU: "S", Quantity: 1, Status: order.StatusCancelled, AvailableAfter: 4, Fence: 3, Replayed: true}) {
		t.Fatalf("the right shape: %+v, %v", outs, err)
	}
}

// FuzzParseRecord holds parseRecord's way without encoding/json to encoding/json's reading of the same
// record: the same fields, or both refuse it.
func FuzzParseRecord(f *testing.F) {
	f.Add("reserved", "", int64(1), int64(4), int64(0))
	f.Add("rejected", "insufficient_stock", int64(3), int64(2), int64(-1))
	f.Add("x\\\"", "unknown_sku", int64(-9e18), int64(9e18), int64(7))
	f.Add("reserved", "", int64(1), int64(4), int64(3))
	f.Fuzz(func(t *testing.T, status, reason string, quantity, after, fence int64) {
		raw := `{"status":"` + status + `","reason":"` + reason + `","quantity":` + itoa(quantity) +
			`,"available_after":` + itoa(after) + `,"fence":` + itoa(fence) + `}`
		if fence%7 == 3 { // a number as no script writes it
			raw = strings.Replace(raw, `"fence":`, `"fence":-0`, 1)
		}
		got, ok := parseRecord(raw)
		var want outcomeRecord
		wantOK := json.Unmarshal([]byte(raw), &want) == nil && want.Status != ""
		if ok != wantOK || ok && got != want {
			t.Fatalf("parseRecord(%s) = %+v, %v; encoding/json: %+v, %v", raw, got, ok, want, wantOK)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
