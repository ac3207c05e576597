package order

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MaxLines is the most lines one order may have: 50.
const MaxLines = 50

// Line is one SKU of an order with several (a basket) and how many of it.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// MergeLines checks the lines of a basket, adds up the lines of the same SKU and sorts them by SKU: the
// order in which a basket's locks are taken and its lines written. An error wraps ErrInvalid and names the
// line (1-based, as given).
func MergeLines(lines []Line) ([]Line, error) {
	if err := checkRange("number of lines", int64(len(lines)), 1, MaxLines); err != nil {
		return nil, err
	}
	merged := make([]Line, 0, len(lines))
	for i, l := range lines {
		if err := cmp.Or(ValidateSKU(l.SKU), ValidateQuantity(l.Quantity)); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		j := slices.IndexFunc(merged, func(m Line) bool { return m.SKU == l.SKU })
		if j < 0 {
			merged = append(merged, l)
			continue
		}
		if merged[j].Quantity += l.Quantity; merged[j].Quantity > MaxQuantity {
			return nil, fmt.Errorf("%w quantity of sku %s: its lines add up to %d, over %d (line %d)",
				ErrInvalid, quote(l.SKU), merged[j].Quantity, MaxQuantity, i+1)
		}
	}
	slices.SortFunc(merged, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	return merged, nil
}
