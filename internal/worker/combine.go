package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Orders of one SKU that arrive while another order of it is being decided in this process are decided
// together (flat combining: Hendler, Incze, Shavit and Tzafrir, SPAA 2010). One consumer per SKU leads at a
// time: it takes the SKU's lock (the lock middleware) and, while holding it, decides the SKU's waiting
// orders in batches of up to inventory.MaxBatch, each batch one stock script call and one pipelined round
// trip with the batch's outcome events and acks. The other consumers follow: they wait for their order's
// outcome without taking the lock. A leader leads for at most leadFor, then hands the lead to the oldest
// waiting order, whose consumer takes the lock anew: the lock's hand-off bound (rlock.HandOff) then lets
// other processes have their turn.
//
// Every order gets the outcome it would have got alone (a batch decides in arrival order, as one call per
// order would), and a failed batch leaves every order of it to be retried, as a failed order is alone.

// leadFor is how long one consumer leads a SKU before handing the lead on: the lock's hand-off bound.
const leadFor = rlock.DefaultHandOffHold

// errGaveUp: a follower waited for its outcome as long as it may wait for the lock.
var errGaveUp = errors.New("worker: waited the lock wait for a batch to decide the order")

// errTakeLock: an elided batch decided nothing and goes back to be decided under the lock.
var errTakeLock = errors.New("worker: the batch is to be decided under the lock")

// combiner holds the orders waiting per SKU.
type combiner struct {
	mu   sync.Mutex
	skus map[string]*skuOrders // a SKU is here while one of its orders leads
	// decide decides one batch under the leader's lock hold (token; ctx is the leader's): stock, outcome
	// events and acks, and the lock's release with them when it says so (after asking more).
	decide func(ctx context.Context, batch []*pending, token int64, more func() bool) (released bool, err error)
	// maxWait bounds a follower's wait, as LOCK_WAIT bounds a leader's; 0: none.
	maxWait time.Duration
	// elide: a leader first decides its batches with inventory.ElideLock, each taking the lock inside its
	// stock script, and goes to the lock step only when a batch finds the lock held (leadElided).
	elide bool
	// leadFor bounds one consumer's lead of a SKU: leadFor by default.
	leadFor time.Duration
}

type skuOrders struct {
	waiting []*pending // arrival order, not yet taken into a batch
	leader  *pending
}

// pending is one order in the combiner.
type pending struct {
	msg   *message.Message
	order handlers.Order
	since time.Time
	taken bool // in a batch being decided
	// gaveUp is the error of a follower that gave up while its order was taken: should the batch come
	// back undecided (putBack), the order gets it rather than a second wait.
	gaveUp error
	waited time.Duration // from joining until its batch was decided
	done   chan error    // the batch's outcome: nil when decided, published and acked
	lead   chan struct{} // this order's consumer leads now
}

func newCombiner(maxWait time.Duration, decide func(context.Context, []*pending, int64, func() bool) (bool, error)) *combiner {
	return &combiner{skus: make(map[string]*skuOrders), maxWait: maxWait, decide: decide, leadFor: leadFor}
}

// step is the chain's combining step, between decode and the lock: a follower returns its order's outcome;
// the leader goes on to the lock and the last step, which decides the batches (lead).
func (c *combiner) step(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := handlers.OrderOf(msg)
		if err != nil || !o.Single() {
			return h(msg) // a basket or lifecycle event is decided alone
		}
		p := &pending{msg: msg, order: o, since: time.Now(), done: make(chan error, 1), lead: make(chan struct{}, 1)}
		if !c.join(p) {
			if leads, err := c.follow(p); !leads {
				return nil, err
			}
		}
		defer c.stepDown(p)
		if c.elide {
			if done, err := c.leadElided(msg, o.SKU); done {
				return nil, err
			}
		}
		return h(msg)
	}
}

// putBack returns a batch that decided nothing to the head of its SKU's queue, in its order; a follower
// that gave up meanwhile gets its error instead, so no follower waits longer than its bound.
func (c *combiner) putBack(sku string, batch []*pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var back []*pending
	for _, p := range batch {
		p.taken = false
		if p.gaveUp != nil {
			p.done <- p.gaveUp
			continue
		}
		back = append(back, p)
	}
	q := c.skus[sku]
	q.waiting = append(back, q.waiting...)
}

// join queues p behind its SKU's orders; it reports whether p leads (no other order of the SKU does).
func (c *combiner) join(p *pending) (leads bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	if q == nil {
		c.skus[p.order.SKU] = &skuOrders{waiting: []*pending{p}, leader: p}
		return true
	}
	q.waiting = append(q.waiting, p)
	return false
}

// follow waits until p's batch is decided or p leads; a follower that waited maxWait, or whose message
// context ended, gives up unless its order is being decided.
func (c *combiner) follow(p *pending) (leads bool, err error) {
	var timeout <-chan time.Time
	if c.maxWait > 0 {
		t := time.NewTimer(c.maxWait)
		defer t.Stop()
		timeout = t.C
	}
	ctx := p.msg.Context()
	select {
	case err := <-p.done:
		return false, err
	case <-p.lead:
		return true, nil
	case <-timeout:
		err = fmt.Errorf("lock %s: %w: %w", p.order.SKU, rlock.ErrNotObtained, errGaveUp)
	case <-ctx.Done():
		err = fmt.Errorf("lock %s: %w: %w", p.order.SKU, rlock.ErrNotObtained, context.Cause(ctx))
	}
	if c.leave(p, err) {
		return false, err
	}
	select { // taken into a batch, or made leader, meanwhile
	case err := <-p.done:
		return false, err
	case <-p.lead:
		return true, nil
	}
}

// leave takes a follower that gives up out of its SKU's queue; false when it cannot: its order is being
// decided, or it was just made leader.
func (c *combiner) leave(p *pending, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	if p.taken {
		p.gaveUp = err
	}
	if p.taken || q.leader == p {
		return false
	}
	q.waiting = slices.DeleteFunc(q.waiting, func(x *pending) bool { return x == p })
	return true
}

// stepDown ends p's lead: the oldest waiting order leads next, or the SKU leaves the combiner. p's own
// order leaves the queue if no batch took it (the lock was not obtained).
func (c *combiner) stepDown(p *pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	q.waiting = slices.DeleteFunc(q.waiting, func(x *pending) bool { return x == p })
	if len(q.waiting) == 0 {
		delete(c.skus, p.order.SKU)
		return
	}
	q.leader = q.waiting[0]
	q.leader.lead <- struct{}{}
}

// take removes up to inventory.MaxBatch waiting orders of sku, oldest first, for a batch.
func (c *combiner) take(sku string) []*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[sku]
	batch := slices.Clone(q.waiting[:min(len(q.waiting), inventory.MaxBatch)])
	q.waiting = q.waiting[len(batch):]
	for _, p := range batch {
		p.taken = true
	}
	return batch
}

// lead decides the batches of the leader msg's SKU under its lock hold, for at most leadFor, and returns
// the outcome of its own order, which is in the first batch (a leader's order is the oldest waiting). A
// batch that released the lock with its outcomes is the last.
func (c *combiner) lead(msg *message.Message, token int64) error {
	o, err := handlers.OrderOf(msg)
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = c.batches(msg, o.SKU, token, func() bool { return time.Since(start) < c.leadFor && c.waiting(o.SKU) })
	return err
}

// leadElided decides the batches of the leader msg's SKU as lead does, but each taking the SKU's lock
// inside its stock script (inventory.ElideLock); done reports that its own order was decided, with own its
// outcome. A batch that finds the lock held (another process's turn, a Redisson client) goes back to the
// head of the queue untouched and the lead ends there: when its own order is still waiting, the leader
// goes on to take the lock.
func (c *combiner) leadElided(msg *message.Message, sku string) (done bool, own error) {
	return c.batches(msg, sku, inventory.ElideLock, func() bool { return false })
}

// batches decides batches of sku, oldest orders first, for at most leadFor, until one fails, one
// releases the lock, or one finds it held (put back). done reports that the first batch, which holds the
// leader's own order, was decided, with own its outcome.
func (c *combiner) batches(msg *message.Message, sku string, token int64, more func() bool) (done bool, own error) {
	start := time.Now()
	for released := false; !released && time.Since(start) < c.leadFor; {
		batch := c.take(sku)
		if len(batch) == 0 {
			break
		}
		var err error
		if released, err = c.decideEach(msg, batch, token, more); errors.Is(err, errTakeLock) {
			c.putBack(sku, batch)
			break
		}
		if !done {
			done, own = true, err
		}
		if err != nil {
			break
		}
	}
	return done, own
}

// decideEach decides batch and hands each order its outcome. A batch that failed permanently (one order's
// corrupt record, say) is decided again one order at a time, so that only the orders that fail on their own
// count the failure. A panic is handed to every follower of the batch before it goes on up: they would wait
// for it forever.
func (c *combiner) decideEach(leader *message.Message, batch []*pending, token int64, more func() bool) (released bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			c.decided(leader, batch, fmt.Errorf("the order deciding its batch panicked: %v", v))
			panic(v)
		}
	}()
	released, err = c.decide(leader.Context(), batch, token, more)
	switch oneByOne := len(batch) > 1 && classify(err) == permanent; {
	case errors.Is(err, inventory.ErrLocked) || oneByOne && token == inventory.ElideLock:
		// Decided nothing: the batch goes back to be decided under the lock, where a batch that fails
		// permanently is decided order by order (an elided order could meet the lock taken meanwhile).
		return false, fmt.Errorf("%w: %w", errTakeLock, err)
	case !oneByOne:
		c.decided(leader, batch, err)
		return released, err
	}
	return false, c.decideOneByOne(leader, batch, token)
}

// decideOneByOne decides each order of batch alone and returns the leader's outcome.
func (c *combiner) decideOneByOne(leader *message.Message, batch []*pending, token int64) (err error) {
	for _, p := range batch {
		single := []*pending{p}
		_, perr := c.decide(leader.Context(), single, token, func() bool { return true })
		c.decided(leader, single, perr)
		if p.msg == leader {
			err = perr
		}
	}
	return err
}

// decided hands a batch's outcome to its followers' consumers, and records each order's wait.
func (c *combiner) decided(leader *message.Message, batch []*pending, err error) {
	for _, p := range batch {
		if err == nil {
			recordWait(leader, p, len(batch))
		}
		if p.msg != leader {
			select { // once: a panic's second call finds the outcome already there
			case p.done <- err:
			default:
			}
		}
	}
}

// waiting reports whether orders of sku wait for a batch.
func (c *combiner) waiting(sku string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.skus[sku].waiting) > 0
}

// requests are the decisions a batch asks for: each order's context and how long it waited, until now.
func requests(batch []*pending) []handlers.Request {
	now := time.Now()
	reqs := make([]handlers.Request, len(batch))
	for i, p := range batch {
		p.waited = now.Sub(p.since)
		reqs[i] = handlers.Request{Ctx: p.msg.Context(), Order: p.order, Waited: p.waited}
	}
	return reqs
}

// recordWait records how long p waited for its decision (stockflow.order.wait, under its own trace) and,
// for an order decided in another order's batch, notes on its span that it was, by which order's consumer
// and after what wait: it took no lock of its own, so it has no lock acquire span.
func recordWait(leader *message.Message, p *pending, size int) {
	// Not cancellable: the SDK drops a measurement whose context ended (the leader's lease ends with the
	// release its last batch sends).
	ctx := context.WithoutCancel(p.msg.Context())
	if p.msg == leader {
		orderWait.Record(ctx, p.waited.Seconds(), waitLed)
		return
	}
	orderWait.Record(ctx, p.waited.Seconds(), waitCombined)
	trace.SpanFromContext(ctx).AddEvent(EventCombined, trace.WithAttributes(
		attribute.String("stockflow.batch.leader", leader.UUID), attribute.Int("stockflow.batch.size", size),
		attribute.Float64("stockflow.lock.wait.seconds", p.waited.Seconds())))
}

// EventCombined is the span event of an order decided in another order's batch.
const EventCombined = "decided in a batch"
