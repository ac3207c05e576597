package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
)

// lifecycleLag is how many orders after its order a cancel or fulfil event is published: late enough that
// the worker has mostly decided the order, soon enough that some events still race it (and are refused as
// unknown_order). The events of the last orders are published after the last order.
const lifecycleLag = 20

// eventKey names an event of this run: its type and its order. An order's reservation and its cancel or
// fulfil share the order id, and so do their outcomes.
type eventKey struct {
	kind    order.Type
	orderID string
}

// keyOf is the key of event o.
func keyOf(o order.Order) eventKey { return eventKey{o.Kind(), o.OrderID} }

// String names the event in a problem: "order r-1", "cancel of order r-1".
func (k eventKey) String() string {
	if k.kind == order.TypeReserve {
		return "order " + k.orderID
	}
	return string(k.kind) + " of order " + k.orderID
}

// placedOrder is what the producer remembers of an event it published.
type placedOrder struct {
	lines    []order.Line // of a reservation: a basket's lines, or a single-SKU order's one
	basket   bool
	sku      string // the SKU it names (a basket: none)
	placedAt time.Time
}

// heldEvent is a cancel or fulfil waiting for the order numbered due to be published.
type heldEvent struct {
	due   int64
	event order.Order
}

// publish publishes the run's orders, and the cancel and fulfil events that follow some of them, through
// Watermill, from cfg.Publishers goroutines, and returns the events it placed. With a rate, order i is due at
// (i-1)/rate after the start and waits for it: a late publish does not delay the orders after it, so the
// rate holds while one publish takes longer than 1/rate (one goroutine a tick topped out near 1,000 orders
// a second).
func (r *run) publish(ctx context.Context) (map[eventKey]placedOrder, error) {
	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: r.cfg.Replicas.Publishing(r.rdb)}, nil)
	if err != nil {
		return nil, err
	}
	defer wpub.Close()
	p := &publisher{
		cfg:    r.cfg,
		parts:  r.parts,
		skus:   r.skus,
		pub:    wpub, // a trace per order (its send span), to the workers
		bar:    newBar(r.progress, "published", r.cfg.Orders),
		placed: make(map[eventKey]placedOrder, r.cfg.Orders),
	}
	defer p.bar.done()
	if r.cfg.Rate > 0 {
		p.start, p.interval = time.Now(), time.Duration(float64(time.Second)/r.cfg.Rate)
	}
	return p.placed, p.publishAll(ctx, r.cfg.Publishers)
}

// publisher publishes the orders of one run, numbered 1 .. Orders, from any number of goroutines.
type publisher struct {
	cfg   Config
	parts []order.Partition
	skus  []string
	pub   message.Publisher
	// With a rate: order i is due at start + (i-1) * interval; interval 0: no rate.
	start    time.Time
	interval time.Duration
	bar      *bar
	next     atomic.Int64 // the number of the last order taken

	mu     sync.Mutex
	placed map[eventKey]placedOrder
	held   []heldEvent
}

// publishAll publishes from n goroutines, each with its own random source, then the events still held; it
// returns the first error.
func (p *publisher) publishAll(ctx context.Context, n int) error {
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		d := p.cfg.newDraw(p.skus, [2]uint64{uint64(time.Now().UnixNano()), uint64(i)})
		wg.Go(func() {
			if err := p.publishOrders(ctx, d); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	return p.release(ctx, math.MaxInt64)
}

// publishOrders takes the next order number and publishes that order, and the events due, until all are
// taken or one fails.
func (p *publisher) publishOrders(ctx context.Context, d *draw) error {
	for i := p.next.Add(1); i <= int64(p.cfg.Orders); i = p.next.Add(1) {
		if err := p.awaitDue(ctx, i); err != nil {
			return err
		}
		if err := p.placeOrder(ctx, d, i); err != nil {
			return err
		}
	}
	return nil
}

// placeOrder publishes order number i, holds the cancel or fulfil that follows it (if one does) for
// lifecycleLag orders, and publishes the events now due.
func (p *publisher) placeOrder(ctx context.Context, d *draw, i int64) error {
	o := d.order(p.cfg.RunID + "-" + strconv.FormatInt(i, 10))
	if err := p.place(ctx, o); err != nil {
		return err
	}
	if e, ok := d.lifecycle(o); ok {
		p.hold(heldEvent{due: i + lifecycleLag, event: e})
	}
	return p.release(ctx, i)
}

// awaitDue waits until order number i is due, when a rate is set.
func (p *publisher) awaitDue(ctx context.Context, i int64) error {
	if p.interval == 0 {
		return nil
	}
	wait := time.Until(p.start.Add(time.Duration(i-1) * p.interval))
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold keeps a cancel or fulfil event until its order number is due.
func (p *publisher) hold(e heldEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = append(p.held, e)
}

// release publishes the held events due once order number i is published.
func (p *publisher) release(ctx context.Context, i int64) error {
	p.mu.Lock()
	var due []order.Order
	p.held = slices.DeleteFunc(p.held, func(e heldEvent) bool {
		ready := e.due <= i
		if ready {
			due = append(due, e.event)
		}
		return ready
	})
	p.mu.Unlock()
	for _, e := range due {
		if err := p.place(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// place publishes event o to the partition of its routing SKU, and remembers it.
func (p *publisher) place(ctx context.Context, o order.Order) error {
	o.PlacedAt = time.Now().UTC()
	payload, _ := json.Marshal(o)
	if err := p.send(ctx, p.parts[p.cfg.PartitionOf(o.RouteSKU())].Orders, payload); err != nil {
		return fmt.Errorf("publish %s: %w", keyOf(o), err)
	}
	placed := placedOrder{basket: o.Lines != nil, sku: o.SKU, placedAt: o.PlacedAt}
	if o.Kind() == order.TypeReserve {
		placed.lines = linesOf(o)
		p.bar.add(1)
	}
	p.mu.Lock()
	p.placed[keyOf(o)] = placed
	p.mu.Unlock()
	return nil
}

// send publishes one order to the orders stream topic, retrying through a Redis restart (or failover) for
// up to half a minute. A retry after a lost reply may publish the order twice; the workers decide it once
// all the same.
func (p *publisher) send(ctx context.Context, topic string, payload []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.SetContext(ctx)
		err := p.pub.Publish(topic, msg)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}
