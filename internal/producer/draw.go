package producer

import (
	"math/rand/v2"

	"github.com/stockflow/stockflow/order"
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
func (d *draw) order(id string) order.Order {
	if d.most == 0 {
		return order.Order{OrderID: id, SKU: d.skus[d.pick()], Quantity: d.quantity}
	}
	n := d.fewest + d.r.IntN(d.most-d.fewest+1)
	lines := make([]order.Line, 0, n)
	taken := make(map[string]bool, n)
	for len(lines) < n { // Validate made sure there are n distinct SKUs
		if sku := d.skus[d.pick()]; !taken[sku] {
			taken[sku] = true
			lines = append(lines, order.Line{SKU: sku, Quantity: d.quantity})
		}
	}
	// The distribution's favourites would come first, and the least SKU often with them.
	d.r.Shuffle(n, func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	return order.Order{OrderID: id, Lines: lines}
}

// lifecycle is the cancel or fulfil event that follows order o, naming one of its SKUs at random; false
// when none does.
func (d *draw) lifecycle(o order.Order) (order.Order, bool) {
	var kind order.Type
	switch x := d.r.Float64(); {
	case x < d.cancel:
		kind = order.TypeCancel
	case x < d.cancel+d.fulfil:
		kind = order.TypeFulfil
	default:
		return order.Order{}, false
	}
	lines := linesOf(o)
	return order.Order{Type: kind, OrderID: o.OrderID, SKU: lines[d.r.IntN(len(lines))].SKU}, true
}

// linesOf are the lines of a reservation: a basket's, or a single-SKU order's one.
func linesOf(o order.Order) []order.Line {
	if o.Lines != nil {
		return o.Lines
	}
	return []order.Line{{SKU: o.SKU, Quantity: o.Quantity}}
}
