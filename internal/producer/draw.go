package producer

import (
	"math/rand/v2"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
)

// draw makes the random choices of one publishing goroutine, from its own random source: the SKUs of each
// order, and whether a cancel or fulfil event of the order follows it.
type draw struct {
	r              *rand.Rand
	pick           func() int // the index of a SKU, by --distribution
	skus           []string
	quantity       int64
	fewest, most   int // lines of a basket; 0: single-SKU orders
	cancel, fulfil float64
}

// newDraw returns the choices of a goroutine whose random source starts at seed.
func (c *Config) newDraw(skus []string, seed [2]uint64) *draw {
	r := rand.New(rand.NewPCG(seed[0], seed[1]))
	fewest, most, _ := c.lineRange() // Validate checked it
	return &draw{r: r, pick: c.picker(len(skus), r), skus: skus, quantity: int64(c.Quantity),
		fewest: fewest, most: most, cancel: c.Cancel, fulfil: c.Fulfil}
}

// order is the reservation of order id: one SKU, or a basket of distinct SKUs in random order (the
// worker sorts them).
func (d *draw) order(id string) handlers.Order {
	if d.most == 0 {
		return handlers.Order{OrderID: id, SKU: d.skus[d.pick()], Quantity: d.quantity}
	}
	n := d.fewest + d.r.IntN(d.most-d.fewest+1)
	lines := make([]handlers.Line, 0, n)
	taken := make(map[string]bool, n)
	for len(lines) < n { // Validate made sure there are n distinct SKUs
		if sku := d.skus[d.pick()]; !taken[sku] {
			taken[sku] = true
			lines = append(lines, handlers.Line{SKU: sku, Quantity: d.quantity})
		}
	}
	// The distribution's favourites would come first, and the least SKU often with them.
	d.r.Shuffle(n, func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	return handlers.Order{OrderID: id, Lines: lines}
}

// lifecycle is the cancel or fulfil event that follows order o, naming one of its SKUs at random; false
// when none does.
func (d *draw) lifecycle(o handlers.Order) (handlers.Order, bool) {
	var kind handlers.Type
	switch x := d.r.Float64(); {
	case x < d.cancel:
		kind = handlers.TypeCancel
	case x < d.cancel+d.fulfil:
		kind = handlers.TypeFulfil
	default:
		return handlers.Order{}, false
	}
	lines := linesOf(o)
	return handlers.Order{Type: kind, OrderID: o.OrderID, SKU: lines[d.r.IntN(len(lines))].SKU}, true
}

// linesOf are the lines of a reservation: a basket's, or a single-SKU order's one.
func linesOf(o handlers.Order) []inventory.Line {
	if o.Lines != nil {
		return o.Lines
	}
	return []inventory.Line{{SKU: o.SKU, Quantity: o.Quantity}}
}
