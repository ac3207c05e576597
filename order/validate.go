package order

import "fmt"

// Input limits, checked as an order is decoded and again by the stock store before any Redis call.
const (
	// MaxIDLen is the longest SKU or order id, in bytes.
	MaxIDLen = 128
	// MaxQuantity is the most one order may reserve.
	MaxQuantity = 1_000_000
)

const idRule = "1-128 characters of A-Z a-z 0-9 . _ : -"

// idBytes marks the bytes an id may hold. A table rather than a regexp: checkID runs for every message
// the worker receives.
var idBytes = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")

func byteSet(chars string) (set [256]bool) {
	for i := range len(chars) {
		set[chars[i]] = true
	}
	return set
}

// ValidateOrder checks the fields of an order; the error wraps ErrInvalid and names the first bad field.
func ValidateOrder(orderID, sku string, quantity int64) error {
	if err := ValidateOrderID(orderID); err != nil {
		return err
	}
	if err := ValidateSKU(sku); err != nil {
		return err
	}
	return ValidateQuantity(quantity)
}

// ValidateSKU checks that sku is 1-128 characters of [A-Za-z0-9._:-]. Braces are excluded, so a SKU can
// never break out of its {SKU} hash tag.
func ValidateSKU(sku string) error { return checkID("sku", sku) }

// ValidateOrderID checks that id is 1-128 characters of [A-Za-z0-9._:-].
func ValidateOrderID(id string) error { return checkID("order id", id) }

// ValidateQuantity checks that an order's quantity is 1..MaxQuantity.
func ValidateQuantity(quantity int64) error {
	return checkRange("quantity", quantity, 1, MaxQuantity)
}

func checkID(field, v string) error {
	if validID(v) {
		return nil
	}
	return fmt.Errorf("%w %s %s: want %s", ErrInvalid, field, quote(v), idRule)
}

func validID(v string) bool {
	if len(v) < 1 || len(v) > MaxIDLen {
		return false
	}
	for i := range len(v) {
		if !idBytes[v[i]] {
			return false
		}
	}
	return true
}

func checkRange(field string, v, lo, hi int64) error {
	if v >= lo && v <= hi {
		return nil
	}
	return fmt.Errorf("%w %s %d: want %d-%d", ErrInvalid, field, v, lo, hi)
}

// quote keeps error messages (and the poison stream entries that carry them) short whatever the input.
func quote(v string) string {
	const show = 40
	if len(v) <= show {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:show], len(v))
}
