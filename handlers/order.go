package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/stockflow/stockflow/inventory"
)

// MaxPayload is the largest order payload accepted, in bytes.
const MaxPayload = 64 << 10

// ErrBadInput is wrapped by every error about a message that can never be processed: undecodable or
// invalid. Such a message goes to the poison stream instead of being retried.
var ErrBadInput = errors.New("handlers: bad input")

// Order is the event producers publish to the orders stream, as the JSON payload of a stream entry:
//
//	{"order_id":"o-1","sku":"SKU-1","quantity":2,"placed_at":"2026-11-21T10:00:00Z"}
//
// order_id and sku are 1-128 characters of [A-Za-z0-9._:-]; quantity is 1..1,000,000; placed_at
// (RFC 3339) is optional. Unknown fields are ignored.
type Order struct {
	OrderID  string    `json:"order_id"`
	SKU      string    `json:"sku"`
	Quantity int64     `json:"quantity"`
	PlacedAt time.Time `json:"placed_at,omitzero"`
}

// Result is the outcome event the worker publishes to the results stream for every processed order. A
// redelivered order yields the outcome recorded the first time (Replayed), never a second decrement.
type Result struct {
	OrderID  string           `json:"order_id"`
	SKU      string           `json:"sku"`
	Quantity int64            `json:"quantity"`
	Status   inventory.Status `json:"status"`
	Reason   inventory.Reason `json:"reason"`
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

func newResult(out inventory.Outcome, worker string, waited time.Duration) Result {
	return Result{OrderID: out.OrderID, SKU: out.SKU, Quantity: out.Quantity, Status: out.Status,
		Reason: out.Reason, AvailableAfter: out.AvailableAfter, Fence: out.Fence, Replayed: out.Replayed,
		Worker: worker, ProcessedAt: time.Now().UTC(), LockWaitMs: float64(waited.Microseconds()) / 1000}
}

// DecodeOrder parses and validates an order payload. Its errors wrap ErrBadInput and say what is wrong.
//
// The object is read strictly: a key given twice, or one that differs from a field's name only in case
// ("Quantity"), is refused. Go's decoder alone would match keys case-insensitively and keep the last, so
// {"quantity":1,"Quantity":900000} would be read as 900000 where a case-sensitive gateway saw 1.
func DecodeOrder(payload []byte) (Order, error) {
	var o Order
	switch {
	case len(payload) == 0:
		return o, fmt.Errorf("%w: empty payload", ErrBadInput)
	case len(payload) > MaxPayload:
		return o, fmt.Errorf("%w: payload of %d bytes is over the %d byte limit", ErrBadInput, len(payload), MaxPayload)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := decodeObject(dec, &o); err != nil {
		return o, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return o, fmt.Errorf("%w: payload has data after the order JSON object", ErrBadInput)
	}
	if err := inventory.ValidateOrder(o.OrderID, o.SKU, o.Quantity); err != nil {
		return o, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return o, nil
}

// orderFields are the keys of an order and where their values go.
var orderFields = map[string]func(*Order) any{
	"order_id":  func(o *Order) any { return &o.OrderID },
	"sku":       func(o *Order) any { return &o.SKU },
	"quantity":  func(o *Order) any { return &o.Quantity },
	"placed_at": func(o *Order) any { return &o.PlacedAt },
}

// decodeObject reads one JSON object into o, key by key, refusing repeated and case-variant keys.
func decodeObject(dec *json.Decoder, o *Order) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return notAnOrder(err, "it does not start with {")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return notAnOrder(err, "")
		}
		key, _ := tok.(string)
		if err := checkKey(seen, key); err != nil {
			return err
		}
		if err := decodeValue(dec, o, key); err != nil {
			return notAnOrder(err, "")
		}
	}
	_, err := dec.Token() // the closing brace
	return notAnOrder(err, "")
}

// checkKey refuses a key seen before, or one that only case-folds to an order field's name.
func checkKey(seen map[string]bool, key string) error {
	folded := foldKey(key)
	if seen[folded] {
		return fmt.Errorf("payload has the key %.64q more than once (keys are compared without case)", key)
	}
	seen[folded] = true
	for field := range orderFields {
		if key != field && strings.EqualFold(key, field) {
			return fmt.Errorf("payload key %.64q differs from the field %q only in case", key, field)
		}
	}
	return nil
}

// foldKey maps every letter of key to the smallest one it case-folds with, as encoding/json compares
// keys (so "K", "k" and the Kelvin sign fold alike).
func foldKey(key string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, key)
}

// decodeValue reads the value of key into its field, or skips it when the key is not an order field.
func decodeValue(dec *json.Decoder, o *Order, key string) error {
	if field, ok := orderFields[key]; ok {
		return dec.Decode(field(o))
	}
	var skip json.RawMessage
	return dec.Decode(&skip)
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

type orderKey struct{}

// WithOrder returns ctx carrying the decoded order of the message being handled.
func WithOrder(ctx context.Context, o Order) context.Context {
	return context.WithValue(ctx, orderKey{}, o)
}

// OrderFrom returns the order stored by WithOrder.
func OrderFrom(ctx context.Context) (Order, bool) {
	o, ok := ctx.Value(orderKey{}).(Order)
	return o, ok
}
