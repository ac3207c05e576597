package order

import (
	"strconv"
	"time"
)

// decodeFlat reads the payload most producers send, a flat object of plain values:
//
//	{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}
//
// each of type, order_id, sku, quantity and placed_at at most once and spelled as the fields are, the
// strings printable ASCII without escapes, quantity an integer of at most 18 digits, nothing else around
// the object but JSON whitespace. It reads exactly what encoding/json would read (the fuzz test compares
// them) without its scanner, whose state and stack growth cost a worker more than the rest of the decoding;
// ok is false for any other payload, which Decode reads the general way.
func decodeFlat(payload []byte) (o Order, ok bool) {
	s := flatScan{data: payload}
	if !s.byte('{') {
		return o, false
	}
	var seen [5]bool // type, order_id, sku, quantity, placed_at
	for first := true; ; first = false {
		if s.byte('}') {
			return o, s.end()
		}
		if !first && !s.byte(',') {
			return o, false
		}
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return o, false
		}
		if !s.field(&o, key, &seen) {
			return o, false
		}
	}
}

// flatScan walks a payload for decodeFlat, bounds checked (it may be anything).
type flatScan struct {
	data []byte
	i    int
}

// flatKeys are the keys decodeFlat reads, by their index in its seen.
var flatKeys = [5]string{"type", "order_id", "sku", "quantity", "placed_at"}

// field reads the value of key into o; false for an unknown or repeated key or a value not of its kind.
func (s *flatScan) field(o *Order, key []byte, seen *[5]bool) bool {
	k := 0
	for k < len(flatKeys) && flatKeys[k] != string(key) {
		k++
	}
	if k == len(flatKeys) || seen[k] {
		return false
	}
	seen[k] = true
	if k == 3 {
		n, ok := s.int()
		o.Quantity = n
		return ok
	}
	s.space()
	start := s.i
	v, ok := s.str()
	switch {
	case !ok:
		return false
	case k == 0:
		o.Type = Type(v)
	case k == 1:
		o.OrderID = string(v)
	case k == 2:
		o.SKU = string(v)
	default: // as encoding/json reads a time.Time
		var t time.Time
		if t.UnmarshalJSON(s.data[start:s.i]) != nil {
			return false
		}
		o.PlacedAt = t
	}
	return true
}

// space skips JSON whitespace.
func (s *flatScan) space() {
	for s.i < len(s.data) && (s.data[s.i] == ' ' || s.data[s.i] == '\t' || s.data[s.i] == '\n' || s.data[s.i] == '\r') {
		s.i++
	}
}

// byte reads c after whitespace; false (nothing read) when the next byte is another.
func (s *flatScan) byte(c byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *flatScan) end() bool {
	s.space()
	return s.i == len(s.data)
}

// str reads a string of printable ASCII other than \ and ".
func (s *flatScan) str() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.data) && s.data[s.i] != '"'; s.i++ {
		if c := s.data[s.i]; c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false
		}
	}
	if s.i == len(s.data) {
		return nil, false
	}
	s.i++
	return s.data[start : s.i-1], true
}

// int reads 0 or a positive integer of at most 18 digits (what follows is the caller's to check).
func (s *flatScan) int() (int64, bool) {
	s.space()
	var n int64
	start := s.i
	for ; s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9'; s.i++ {
		n = n*10 + int64(s.data[s.i]-'0')
	}
	digits := s.i - start
	return n, digits > 0 && digits <= 18 && (digits == 1 || s.data[start] != '0')
}

// AppendJSON appends the JSON of r, a single-SKU order's outcome (no type, no lines), exactly as
// encoding/json writes it (the test compares them) without its reflection; ok is false for any other
// result, and for strings encoding/json would escape, which the caller marshals the general way (encoding/json).
func (r *Result) AppendJSON(b []byte) (_ []byte, ok bool) {
	if r.Type != "" || r.Lines != nil || !plain(r.OrderID) || !plain(r.SKU) || !plain(string(r.Status)) ||
		!plain(string(r.Reason)) || !plain(r.Worker) || r.ProcessedAt.Year() < 0 || r.ProcessedAt.Year() > 9999 ||
		r.LockWaitMs != 0 && !(r.LockWaitMs >= 1e-6 && r.LockWaitMs < 1e21) { // else json writes an exponent
		return b, false
	}
	b = append(b, `{"order_id":"`...)
	b = append(b, r.OrderID...)
	b = append(b, `","sku":"`...)
	b = append(b, r.SKU...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, r.Quantity, 10)
	b = append(b, `,"status":"`...)
	b = append(b, r.Status...)
	b = append(b, `","reason":"`...)
	b = append(b, r.Reason...)
	b = append(b, `","available_after":`...)
	b = strconv.AppendInt(b, r.AvailableAfter, 10)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, r.Fence, 10)
	b = append(b, `,"replayed":`...)
	b = strconv.AppendBool(b, r.Replayed)
	b = append(b, `,"worker":"`...)
	b = append(b, r.Worker...)
	b = append(b, `","processed_at":"`...)
	b = r.ProcessedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","lock_wait_ms":`...)
	b = strconv.AppendFloat(b, r.LockWaitMs, 'f', -1, 64)
	return append(b, '}'), true
}

// plain: s is printable ASCII that encoding/json writes as it is (no quote, backslash, or <, >, & which it
// escapes for HTML).
func plain(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
