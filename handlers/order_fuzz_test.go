package handlers

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeOrder: any payload is either refused as bad input or decoded into a valid order that the
// standard decoder reads the same way (no key smuggling) and that survives a round trip. The corpus under
// testdata/fuzz runs as regression cases with every go test.
//
//	go test -run '^$' -fuzz FuzzDecodeOrder -fuzztime 5m ./handlers/
func FuzzDecodeOrder(f *testing.F) {
	for _, seed := range []string{
		`{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}`,
		`{"order_id":"o-1","sku":"SKU-1","quantity":1,"Quantity":900000}`,
		`{"order_id":"o","sku":"S","quantity":1,"extra":{"nested":[1,2,{"quantity":5}]}}`,
		`{"order_id":"o","s\u212au":"S","quantity":1}`,
		`[1,2]`, `null`, `{"order_id":`, `{} {}`,
		`{"type":"cancel","order_id":"o-2","sku":"SKU-7"}`, ` { "order_id" : "o" , "sku":"S","quantity":007}`,
		`{"order_id":"o","sku":"S","quantity":1} x`, `{"order_id":"o","order_id":"p","quantity":1e2}`,
		`{"sku":"S","quantity":999999999999999999,"placed_at":"2026-11-21T10:00:00+01:00"}`, `{}`,
		`{"order_id": "o", "sku": "S", "quantity": 1, "placed_at": "2026-11-21T10:00:00Z"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		// The fast way (encoding/json, then wellFormed) reads exactly what the key-by-key way reads, and
		// takes every payload the key-by-key way accepts.
		slow, slowErr := decodeKeyByKey(payload)
		var fast Order
		if json.Unmarshal(payload, &fast) == nil && wellFormed(payload) {
			if slowErr != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q: the fast way reads %+v, key by key %+v (%v)", payload, fast, slow, slowErr)
			}
		} else if slowErr == nil {
			t.Fatalf("%q: read key by key as %+v, refused by the fast way", payload, slow)
		}
		// The flat way reads only what the key-by-key way reads.
		if flat, ok := decodeFlat(payload); ok && (slowErr != nil || !reflect.DeepEqual(flat, slow)) {
			t.Fatalf("%q: the flat way reads %+v, key by key %+v (%v)", payload, flat, slow, slowErr)
		}
		o, err := DecodeOrder(payload)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %v does not wrap ErrBadInput", err)
			}
			return
		}
		var std Order
		if err := json.Unmarshal(payload, &std); err != nil || std.OrderID != o.OrderID || std.SKU != o.SKU ||
			std.Quantity != o.Quantity || !std.PlacedAt.Equal(o.PlacedAt) {
			t.Fatalf("accepted %q as %+v, but encoding/json reads %+v (%v)", payload, o, std, err)
		}
		again, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := DecodeOrder(again)
		if err != nil || o2.OrderID != o.OrderID || o2.SKU != o.SKU || o2.Quantity != o.Quantity || !o2.PlacedAt.Equal(o.PlacedAt) {
			t.Fatalf("round trip of %+v: %+v, %v", o, o2, err)
		}
	})
}
