package inventory

import (
	"fmt"

	"github.com/stockflow/stockflow/order"
)

// checkRange refuses v outside lo..hi with an error that wraps order.ErrInvalid and names field.
func checkRange(field string, v, lo, hi int64) error {
	if v >= lo && v <= hi {
		return nil
	}
	return fmt.Errorf("%w %s %d: want %d-%d", order.ErrInvalid, field, v, lo, hi)
}

// quote keeps error messages (and the poison stream entries that carry them) short whatever the input.
func quote(v string) string {
	const show = 40
	if len(v) <= show {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:show], len(v))
}
