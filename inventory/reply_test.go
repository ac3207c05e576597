package inventory

import (
	"strings"
	"testing"
)

// A reply of another shape than reserve_batch.lua's is an error, never a zero Outcome. (Internal test:
// a real script cannot be made to reply wrongly; the batch tests cover the right shape.)
func TestDecodeOutcomesRefusesAReplyOfTheWrongShape(t *testing.T) {
	orders := []Order{{ID: "o-1", SKU: "S", Quantity: 1}, {ID: "o-2", SKU: "S", Quantity: 1}}
	good := []any{int64(0), "reserved", "", int64(1), int64(4), int64(0)}
	for _, tc := range []struct {
		name  string
		reply []any
		msg   string
	}{
		{"one outcome short", []any{good}, "for a batch of 2 orders"},
		{"an outcome that is not an array", []any{good, "OK"}, `reply OK for order "o-2"`},
		{"an outcome with a field missing", []any{good, good[:5]}, `for order "o-2"`},
		{"an outcome with a field of another type", []any{good, []any{"0", "reserved", "", int64(1), int64(4), int64(0)}}, `for order "o-2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := decodeOutcomes(orders, tc.reply)
			if err == nil || outs != nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, %v; want an error containing %q", outs, err, tc.msg)
			}
		})
	}
	outs, err := decodeOutcomes(orders, []any{good, good})
	if err != nil || outs[1] != (Outcome{OrderID: "o-2", SKU: "S", Quantity: 1, Status: StatusReserved, AvailableAfter: 4}) {
		t.Fatalf("the right shape: %+v, %v", outs, err)
	}
}
