package order

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzDecode: any payload is either refused as bad input or decoded into a valid order that the
// standard decoder reads the same way (no key smuggling) and that survives a round trip. The corpus under
// testdata/fuzz runs as regression cases with every go test.
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 5m ./order/
func FuzzDecode(f *testing.F) {
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
		o, err := Decode(payload)
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
		o2, err := Decode(again)
		if err != nil || o2.OrderID != o.OrderID || o2.SKU != o.SKU || o2.Quantity != o.Quantity || !o2.PlacedAt.Equal(o.PlacedAt) {
			t.Fatalf("round trip of %+v: %+v, %v", o, o2, err)
		}
	})
}

// FuzzFlatOutcome: the outcome of a single-SKU order written by AppendJSON is byte for byte what
// encoding/json writes; AppendJSON leaves to encoding/json what it would write otherwise (escaped strings,
// exponents, years it refuses).
//
//	go test -run '^$' -fuzz FuzzFlatOutcome -fuzztime 2m ./order/
func FuzzFlatOutcome(f *testing.F) {
	f.Add("o-1", "SKU-1", "worker-1", "reserved", "", int64(2), int64(4998), int64(7), true, int64(1795833230), int64(899351403), 1.234)
	f.Add("o-<1>", "SKU&1", "w\"1", "rejected", "insufficient_stock", int64(-1), int64(-5), int64(-1), false, int64(0), int64(0), 0.0)
	f.Add("ö", "\u2028", "w\\", "x", "y\n", int64(9e18), int64(0), int64(0), false, int64(-62135596800), int64(0), 1e17)
	for _, id := range []string{"o<1", "o>1", "o&1", "o\x7f", "o\x1f"} { // each alone: encoding/json escapes it
		f.Add(id, "S", "w", "reserved", "", int64(1), int64(0), int64(0), false, int64(0), int64(0), 1.0)
	}
	// Years encoding/json refuses (before 0, after 9999), and waits it writes with an exponent.
	for _, at := range []int64{-62167219201, 253402300800} {
		f.Add("o", "S", "w", "reserved", "", int64(1), int64(0), int64(0), false, at, int64(0), 1.0)
	}
	for _, wait := range []float64{1e-7, 1e21, 5e-324, -0.0} {
		f.Add("o", "S", "w", "reserved", "", int64(1), int64(0), int64(0), false, int64(0), int64(0), wait)
	}
	f.Fuzz(func(t *testing.T, id, sku, worker, status, reason string, qty, avail, fence int64, replayed bool, sec, nsec int64, waitMs float64) {
		r := Result{OrderID: id, SKU: sku, Quantity: qty, Status: Status(status), Reason: Reason(reason),
			AvailableAfter: avail, Fence: fence, Replayed: replayed, Worker: worker,
			ProcessedAt: time.Unix(sec, nsec).UTC(), LockWaitMs: waitMs}
		got, ok := r.AppendJSON(nil)
		want, err := json.Marshal(r)
		if ok && (err != nil || string(got) != string(want)) {
			t.Fatalf("AppendJSON wrote\n %s\nencoding/json\n %s (%v)", got, want, err)
		}
	})
}
