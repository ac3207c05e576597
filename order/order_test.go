package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	valid := `{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}`
	o, err := Decode([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	want := Order{OrderID: "o-1", SKU: "SKU-1", Quantity: 2, PlacedAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("decoded %+v, want %+v", o, want)
	}
	if _, err := Decode([]byte(`{"order_id":"o-1","sku":"SKU-1","quantity":2,"channel":"web"}`)); err != nil {
		t.Fatalf("unknown fields must be ignored: %v", err)
	}

	bad := []struct {
		name, payload, mention string
	}{
		{"an empty payload is refused", ``, "empty"},
		{"a payload over 64 KiB is refused", `{"pad":"` + strings.Repeat("x", MaxPayload) + `"}`, "limit"},
		{"broken JSON is refused", `{"order_id":`, "not an order JSON object"},
		{"a JSON array is refused", `[1,2]`, "not an order JSON object"},
		{"data after the object is refused", valid + ` {}`, "after the order"},
		{"a string quantity is refused", `{"order_id":"o","sku":"S","quantity":"2"}`, "not an order JSON object"},
		{"a fractional quantity is refused", `{"order_id":"o","sku":"S","quantity":1.5}`, "not an order JSON object"},
		{"a zero quantity is refused", `{"order_id":"o","sku":"S","quantity":0}`, "quantity"},
		{"a negative quantity is refused", `{"order_id":"o","sku":"S","quantity":-1}`, "quantity"},
		{"a quantity over the maximum is refused", `{"order_id":"o","sku":"S","quantity":1000001}`, "quantity"},
		{"a missing order id is refused", `{"sku":"S","quantity":1}`, "order"},
		{"a SKU with a space is refused", `{"order_id":"o","sku":"S 1","quantity":1}`, "sku"},
		{"a SKU with braces is refused", `{"order_id":"o","sku":"{S}","quantity":1}`, "sku"},
		{"a bad placed_at is refused", `{"order_id":"o","sku":"S","quantity":1,"placed_at":"yesterday"}`, "not an order JSON object"},
		{"a second quantity in other case is refused (key smuggling)", `{"order_id":"o","sku":"S","quantity":1,"Quantity":900000}`, "more than once"},
		{"a repeated key is refused", `{"order_id":"o","sku":"S","quantity":1,"quantity":2}`, "more than once"},
		{"a field name in other case is refused", `{"order_id":"o","sku":"S","Quantity":1}`, "only in case"},
		{"a field name with a Kelvin sign is refused", `{"order_id":"o","s\u212au":"S","quantity":1}`, "only in case"},
		{"a repeated unknown key is refused", `{"order_id":"o","sku":"S","quantity":1,"note":"a","NOTE":"b"}`, "more than once"},
		{"null is refused", `null`, "not an order JSON object"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.payload))
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("err %v, want ErrBadInput", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestDecodeBasketsAndLifecycleEvents(t *testing.T) {
	o, err := Decode([]byte(`{"order_id":"o-2","lines":[{"sku":"B","quantity":1},{"sku":"A","quantity":2},{"sku":"B","quantity":4}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Line{{SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 5}}; !reflect.DeepEqual(o.Lines, want) || o.Single() {
		t.Fatalf("lines %v (single %v), want %v merged and sorted", o.Lines, o.Single(), want)
	}
	if o.RouteSKU() != "A" || !reflect.DeepEqual(o.SKUs(), []string{"A", "B"}) {
		t.Fatalf("route %q, skus %v", o.RouteSKU(), o.SKUs())
	}
	o, err = Decode([]byte(`{"type":"cancel","order_id":"o-2","sku":"B"}`))
	if err != nil || o.Kind() != TypeCancel || o.Single() || o.RouteSKU() != "B" {
		t.Fatalf("cancel: %+v, %v", o, err)
	}
	if o, err := Decode([]byte(`{"order_id":"o","sku":"S","quantity":1}`)); err != nil || !o.Single() || o.Kind() != TypeReserve {
		t.Fatalf("single: %+v, %v", o, err)
	}

	line := func(i int) string { return fmt.Sprintf(`{"sku":"S%d","quantity":1}`, i) }
	many := make([]string, MaxLines+1)
	for i := range many {
		many[i] = line(i)
	}
	bad := []struct{ name, payload, mention string }{
		{"sku and lines together", `{"order_id":"o","sku":"S","quantity":1,"lines":[{"sku":"A","quantity":1}]}`, "not both"},
		{"no lines", `{"order_id":"o","lines":[]}`, "number of lines 0"},
		{"lines that are not an array", `{"order_id":"o","lines":{"sku":"A"}}`, "lines is not an array"},
		{"a bad line names it", `{"order_id":"o","lines":[{"sku":"A","quantity":1},{"sku":"A B","quantity":1}]}`, "line 2: "},
		{"a line with a zero quantity", `{"order_id":"o","lines":[{"sku":"A","quantity":0}]}`, "line 1: "},
		{"a line key in other case", `{"order_id":"o","lines":[{"sku":"A","Quantity":1}]}`, "line 1: payload key"},
		{"a line key twice", `{"order_id":"o","lines":[{"sku":"A","quantity":1,"quantity":9}]}`, "line 1: payload has the key"},
		{"more than 50 lines", `{"order_id":"o","lines":[` + strings.Join(many, ",") + `]}`, "number of lines 51"},
		{"merged lines over the limit", `{"order_id":"o","lines":[{"sku":"A","quantity":1000000},{"sku":"A","quantity":1}]}`, "add up to"},
		{"an unknown type", `{"type":"refund","order_id":"o","sku":"S"}`, `type "refund"`},
		{"a cancel with a quantity", `{"type":"cancel","order_id":"o","sku":"S","quantity":1}`, "no quantity"},
		{"a fulfil without a sku", `{"type":"fulfil","order_id":"o"}`, "sku"},
		{"a type in other case", `{"Type":"cancel","order_id":"o","sku":"S"}`, "only in case"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.payload))
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err %v, want ErrBadInput mentioning %q", err, tc.mention)
			}
		})
	}
}

// BenchmarkDecode compares the flat way (decodeFlat) with the general way (encoding/json, then the
// key scan) on the same order, which an unknown key sends the general way.
func BenchmarkDecode(b *testing.B) {
	for name, payload := range map[string]string{
		"flat":    `{"order_id":"o-17","sku":"SKU-42","quantity":1,"placed_at":"2026-11-21T10:00:00Z"}`,
		"general": `{"order_id":"o-17","sku":"SKU-42","quantity":1,"placed_at":"2026-11-21T10:00:00Z","x":0}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode([]byte(payload)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The flat way takes the payloads producers send (the producer's own, written by encoding/json; one with
// spaces; a lifecycle event) and reads them as the key-by-key way does.
func TestTheFlatWayTakesWhatProducersSend(t *testing.T) {
	placed, err := json.Marshal(Order{OrderID: "o-1", SKU: "SKU-1", Quantity: 2, PlacedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{string(placed),
		`{ "order_id": "o-2", "sku": "SKU-7", "quantity": 10, "placed_at": "2026-11-21T10:00:00+01:00" }` + "\n",
		`{"type":"cancel","order_id":"o-2","sku":"SKU-7"}`,
	} {
		flat, ok := decodeFlat([]byte(payload))
		want, err := decodeKeyByKey([]byte(payload))
		if !ok || err != nil || !reflect.DeepEqual(flat, want) {
			t.Errorf("%s: the flat way reads %+v (%v), key by key %+v (%v)", payload, flat, ok, want, err)
		}
	}
}
