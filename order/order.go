package order

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxPayload is the largest order payload accepted, in bytes.
const MaxPayload = 64 << 10

// MaxEntryBytes is the largest stream entry (field names and values) the worker reads: an order payload at
// MaxPayload plus room for Watermill's fields and the trace context. A larger entry is moved to the poison
// stream inside Redis, never read.
const MaxEntryBytes = MaxPayload + 16<<10

// ErrBadInput is wrapped by every error about a message that can never be processed: undecodable or
// invalid. Such a message goes to the poison stream instead of being retried.
var ErrBadInput = errors.New("order: bad input")

// Order is the event producers publish to the orders stream, as the JSON payload of a stream entry. A
// reservation names one SKU, or several as lines (a basket: all lines are reserved, or none):
//
//	{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}
//	{"order_id":"o-2","lines":[{"sku":"SKU-1","quantity":2},{"sku":"SKU-7","quantity":1}]}
//
// and a reserved order is cancelled (its stock goes back) or fulfilled (it leaves the stock for good) by
// an event that names the order and one of its SKUs, any one (lifecycle events route by it):
//
//	{"type":"cancel","order_id":"o-2","sku":"SKU-7"}
//	{"type":"fulfil","order_id":"o-2","sku":"SKU-1"}
//
// order_id and sku are 1-128 characters of [A-Za-z0-9._:-]; quantity is 1..1,000,000; a basket has 1 to
// MaxLines lines, and lines of the same SKU are merged (their sum within the quantity limit); placed_at
// (RFC 3339) is optional. Unknown fields are ignored.
type Order struct {
	Type     Type      `json:"type,omitzero"` // "" is TypeReserve
	OrderID  string    `json:"order_id"`
	SKU      string    `json:"sku,omitzero"`
	Quantity int64     `json:"quantity,omitzero"`
	Lines    []Line    `json:"lines,omitzero"` // a basket, sorted by SKU once decoded
	PlacedAt time.Time `json:"placed_at,omitzero"`
}

// Type is what an order event asks for.
type Type string

// The types of order events.
const (
	TypeReserve Type = "reserve"
	TypeCancel  Type = "cancel"
	TypeFulfil  Type = "fulfil"
)

// Kind is the order's type, TypeReserve when none was given.
func (o Order) Kind() Type { return cmp.Or(o.Type, TypeReserve) }

// Single reports whether o reserves one SKU in the single-SKU form: the orders the worker decides in
// batches per SKU. Baskets and lifecycle events are decided one at a time.
func (o Order) Single() bool { return o.Kind() == TypeReserve && o.Lines == nil }

// SKUs are the SKUs whose locks o needs, sorted: a basket's lines, or its one SKU (a lifecycle event's
// lines are known once its order was looked up: the worker fills them in).
func (o Order) SKUs() []string {
	if o.Lines == nil {
		return []string{o.SKU}
	}
	skus := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		skus[i] = l.SKU
	}
	return skus
}

// RouteSKU is the SKU whose partition the order goes to: its sku, or the least SKU of a basket.
func (o Order) RouteSKU() string {
	if o.SKU != "" || len(o.Lines) == 0 {
		return o.SKU
	}
	return slices.MinFunc(o.Lines, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) }).SKU
}

// Result is the outcome event the worker publishes to the results stream for every processed order. A
// redelivered order yields the outcome recorded the first time (Replayed), never a second decrement.
//
// The outcome of a basket or a lifecycle event has Lines, each line's own result, sorted by SKU; its
// Quantity is the sum of the lines, its SKU the line that rejected it (empty otherwise), and its
// AvailableAfter and Fence are 0. A lifecycle event's outcome has its Type.
type Result struct {
	Type     Type         `json:"type,omitzero"`
	OrderID  string       `json:"order_id"`
	SKU      string       `json:"sku"`
	Quantity int64        `json:"quantity"`
	Status   Status       `json:"status"`
	Reason   Reason       `json:"reason"`
	Lines    []LineResult `json:"lines,omitzero"`
	// AvailableAfter is the SKU's available stock right after the reservation, or when it was rejected.
	AvailableAfter int64 `json:"available_after"`
	// Fence is the fencing token the stock write carried, 0 when unfenced.
	Fence int64 `json:"fence"`
	// Replayed is true when the outcome was decided by an earlier delivery and returned as recorded.
	Replayed    bool      `json:"replayed"`
	Worker      string    `json:"worker"`
	ProcessedAt time.Time `json:"processed_at"`
	// LockWaitMs is how long this delivery waited for its SKU lock, in milliseconds.
	LockWaitMs float64 `json:"lock_wait_ms"`
}

// LineResult is the result of one line of a basket or lifecycle event.
type LineResult struct {
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	Status         Status `json:"status"`
	Reason         Reason `json:"reason"`
	AvailableAfter int64  `json:"available_after"`
	Fence          int64  `json:"fence"`
}

// Decode parses and validates an order payload. Its errors wrap ErrBadInput and say what is wrong.
//
// The object is read strictly: a key given twice, or one that differs from a field's name only in case
// ("Quantity"), is refused. Go's decoder alone would match keys case-insensitively and keep the last, so
// {"quantity":1,"Quantity":900000} would be read as 900000 where a case-sensitive gateway saw 1.
func Decode(payload []byte) (Order, error) {
	switch {
	case len(payload) == 0:
		return Order{}, fmt.Errorf("%w: empty payload", ErrBadInput)
	case len(payload) > MaxPayload:
		return Order{}, fmt.Errorf("%w: payload of %d bytes is over the %d byte limit", ErrBadInput, len(payload), MaxPayload)
	}
	o, ok := decodeFlat(payload)
	if !ok {
		var err error
		if o, err = decodeGeneral(payload); err != nil {
			return o, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
	}
	if err := validate(&o); err != nil {
		return o, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return o, nil
}

// decodeGeneral reads any payload decodeFlat does not: with encoding/json when it is one object with its
// keys named once and as spelled (wellFormed), else key by key, which says what is wrong.
func decodeGeneral(payload []byte) (Order, error) {
	var o Order
	if json.Unmarshal(payload, &o) == nil && wellFormed(payload) {
		return o, nil
	}
	return decodeKeyByKey(payload)
}

// validate checks a decoded order by its type, and merges and sorts a basket's lines.
func validate(o *Order) error {
	switch o.Kind() {
	case TypeReserve:
		return validateReserve(o)
	case TypeCancel, TypeFulfil:
		if o.Quantity != 0 || o.Lines != nil {
			return fmt.Errorf("a %s event names the order and one of its SKUs: it takes no quantity or lines", o.Type)
		}
		return cmp.Or(ValidateOrderID(o.OrderID), ValidateSKU(o.SKU))
	}
	return fmt.Errorf("type %.40q: want %s (the default), %s or %s", o.Type, TypeReserve, TypeCancel, TypeFulfil)
}

// validateReserve checks a reservation: one SKU, or a basket, whose lines it merges and sorts.
func validateReserve(o *Order) (err error) {
	switch {
	case o.Lines == nil:
		return ValidateOrder(o.OrderID, o.SKU, o.Quantity)
	case o.SKU != "" || o.Quantity != 0:
		return errors.New("an order has either sku and quantity or lines, not both")
	}
	o.Lines, err = MergeLines(o.Lines)
	return cmp.Or(ValidateOrderID(o.OrderID), err)
}

// wellFormed reports whether payload, valid JSON (json.Unmarshal took it), is one object that names each
// key once and each field as it is spelled (keys compared without case, as encoding/json does), and whose
// lines, if it has any, are an array of such objects: the payloads for which encoding/json reads what
// decodeObject reads. With encoding/json it is decodeGeneral's fast way (a tenth of the allocations of the
// key-by-key way, which reads every other payload and says what is wrong); decodeFlat comes first.
func wellFormed(payload []byte) bool {
	s := keyScan{data: payload}
	s.space()
	return s.peek() == '{' && s.object(orderFields, func(key []byte) bool {
		if string(key) != "lines" {
			s.skip()
			return true
		}
		return s.array(func() bool {
			return s.peek() == '{' && s.object(lineFields, func([]byte) bool { s.skip(); return true })
		})
	})
}

// The keys of an order and of a line.
var (
	orderFields = []string{"type", "order_id", "sku", "quantity", "placed_at", "lines"}
	lineFields  = []string{"sku", "quantity"}
)

// keyScan walks valid JSON (json.Valid) by its keys.
type keyScan struct {
	data []byte
	i    int
}

func (s *keyScan) peek() byte { return s.data[s.i] }

func (s *keyScan) space() {
	for s.i < len(s.data) && strings.IndexByte(" \t\r\n", s.data[s.i]) >= 0 {
		s.i++
	}
}

// str reads the string at i and returns its value (a part of data when it has no escapes).
func (s *keyScan) str() []byte {
	start, escaped := s.i, false
	for s.i++; s.data[s.i] != '"'; s.i++ {
		if s.data[s.i] == '\\' {
			escaped, s.i = true, s.i+1
		}
	}
	s.i++
	if raw := s.data[start+1 : s.i-1]; !escaped && utf8.Valid(raw) {
		return raw
	}
	var v string
	_ = json.Unmarshal(s.data[start:s.i], &v) // valid JSON: a valid string
	return []byte(v)
}

// skip reads the value at i.
func (s *keyScan) skip() {
	for depth := 0; ; {
		switch s.peek() {
		case '"':
			for s.i++; s.data[s.i] != '"'; s.i++ {
				if s.data[s.i] == '\\' {
					s.i++
				}
			}
			if s.i++; depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the object or array around a number or literal
				return
			}
			if depth--; depth == 0 {
				s.i++
				return
			}
		case ',':
			if depth == 0 {
				return
			}
		}
		s.i++
	}
}

// object reads the object at i, calling member with i at the value of each key, which member reads; false
// when a key is repeated or a case variant of one of fields (checkKey), or member says false.
func (s *keyScan) object(fields []string, member func(key []byte) bool) bool {
	var keys [8][]byte // room for an order's keys without allocating
	seen := keys[:0]
	for s.i++; ; s.i++ { // past { or ,
		s.space()
		if s.peek() == '}' {
			s.i++
			return true
		}
		key := s.str()
		if checkKey(seen, fields, key) != nil {
			return false
		}
		seen = append(seen, key)
		s.space()
		s.i++ // :
		s.space()
		if !member(key) {
			return false
		}
		s.space()
		if s.peek() == '}' {
			s.i++
			return true
		}
	}
}

// array reads the array at i, calling elem with i at each element, which elem reads; false when it is not
// an array or elem says false.
func (s *keyScan) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	for s.i++; ; s.i++ { // past [ or ,
		s.space()
		if s.peek() == ']' {
			s.i++
			return true
		}
		if !elem() {
			return false
		}
		s.space()
		if s.peek() == ']' {
			s.i++
			return true
		}
	}
}

// decodeKeyByKey reads payload as one JSON object, key by key, refusing repeated and case-variant keys,
// and anything after the object.
func decodeKeyByKey(payload []byte) (Order, error) {
	var o Order
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := decodeObject(dec, &o); err != nil {
		return o, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return o, errors.New("payload has data after the order JSON object")
	}
	return o, nil
}

// decodeObject reads one JSON object into o, key by key, refusing repeated and case-variant keys.
func decodeObject(dec *json.Decoder, o *Order) error {
	return decodeFields(dec, map[string]any{"type": &o.Type, "order_id": &o.OrderID, "sku": &o.SKU,
		"quantity": &o.Quantity, "placed_at": &o.PlacedAt, "lines": linesOf{&o.Lines}})
}

// linesOf decodes a basket's lines as strictly as the order around them.
type linesOf struct{ lines *[]Line }

func (l linesOf) decode(dec *json.Decoder) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return notAnOrder(err, "lines is not an array")
	}
	*l.lines = []Line{}
	for i := 0; dec.More(); i++ { // at most some 2,600 lines fit in MaxPayload; MergeLines counts them
		var line Line
		if err := decodeFields(dec, map[string]any{"sku": &line.SKU, "quantity": &line.Quantity}); err != nil {
			return fmt.Errorf("line %d: %w", i+1, err)
		}
		*l.lines = append(*l.lines, line)
	}
	_, err := dec.Token() // the closing bracket
	return err
}

// decodeFields reads one JSON object into fields (key: pointer to its value, or a linesOf), key by key,
// refusing repeated and case-variant keys.
func decodeFields(dec *json.Decoder, fields map[string]any) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return notAnOrder(err, "it does not start with {")
	}
	var seen [][]byte
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return notAnOrder(err, "")
		}
		key, _ := tok.(string)
		if err := checkKey(seen, slices.Collect(maps.Keys(fields)), []byte(key)); err != nil {
			return err
		}
		seen = append(seen, []byte(key))
		if err := decodeValue(dec, fields[key]); err != nil {
			return err
		}
	}
	_, err := dec.Token() // the closing brace
	return notAnOrder(err, "")
}

// checkKey refuses a key seen before (in seen), or one that only case-folds to the name
// of one of fields. Keys are compared without case, as encoding/json matches them to fields (so "K", "k"
// and the Kelvin sign are alike).
func checkKey(seen [][]byte, fields []string, key []byte) error {
	if slices.ContainsFunc(seen, func(k []byte) bool { return bytes.EqualFold(k, key) }) {
		return fmt.Errorf("payload has the key %.64q more than once (keys are compared without case)", key)
	}
	for _, field := range fields {
		if string(key) != field && strings.EqualFold(string(key), field) {
			return fmt.Errorf("payload key %.64q differs from the field %q only in case", key, field)
		}
	}
	return nil
}

// decodeValue reads the next value into field, or skips it when field is nil (an unknown key).
func decodeValue(dec *json.Decoder, field any) error {
	switch f := field.(type) {
	case nil:
		var skip json.RawMessage
		return notAnOrder(dec.Decode(&skip), "")
	case linesOf:
		return f.decode(dec)
	default:
		return notAnOrder(dec.Decode(f), "")
	}
}

func notAnOrder(err error, why string) error {
	if err == nil && why == "" {
		return nil
	}
	if err != nil {
		why = err.Error()
	}
	return fmt.Errorf("payload is not an order JSON object: %s", why)
}
