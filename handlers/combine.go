package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
)

// Orders of one SKU that arrive while another order of it is being decided in this process are decided
// together (flat combining: Hendler, Incze, Shavit and Tzafrir, SPAA 2010). One consumer per SKU leads at a
// time: it goes on to the lock middleware, which obtains the SKU's exclusive section, and in it Handle
// decides the SKU's waiting orders in batches of up to inventory.MaxBatch, each batch one stock script call
// and one commit call with the batch's outcome events and acks. The other consumers follow: they wait here
// for their order's outcome without taking the lock. A leader leads for at most leadFor, then hands the lead
// to the oldest waiting order, whose consumer obtains the section anew: the lock's hand-off bound
// (rlock.HandOff) then lets other processes have their turn. In an elided section (the lock taken inside
// each batch's script) a batch that finds the lock held goes back to the head of the queue, and the leader
// whose own order is still waiting returns lockmw.ErrLocked: the middleware then takes the lock.
//
// Every order gets the outcome it would have got alone (a batch decides in arrival order, as one call per
// order would), and a failed batch leaves every order of it to be retried, as a failed order is alone.

// leadFor is how long one consumer leads a SKU before handing the lead on: the lock's hand-off bound.
const leadFor = rlock.DefaultHandOffHold

// errGaveUp: a follower waited for its outcome as long as it may wait for the lock.
var errGaveUp = errors.New("handlers: waited the lock wait for a batch to decide the order")

// ErrPanicked is what the orders of a batch whose decision panicked get (commit.go): a failure that counts
// towards MAX_ATTEMPTS, so an order whose data makes the decision panic ends in the poison stream.
var ErrPanicked = errors.New("handlers: deciding the order's batch panicked")

// errLead wakes a follower to lead its SKU (stepDown).
var errLead = errors.New("handlers: lead")

// woken reads what woke a follower: it leads now (errLead), or its batch's outcome.
func woken(err error) (leads bool, outcome error) {
	if err == errLead {
		return true, nil
	}
	return false, err
}

// errTakeLock: an elided batch decided nothing and goes back to be decided under the lock.
var errTakeLock = errors.New("handlers: the batch is to be decided under the lock")

// combiner holds the orders waiting per SKU.
type combiner struct {
	mu   sync.Mutex
	skus map[string]*skuQueue // a SKU is here while one of its orders leads
	// commits decides the SKUs' batches in the rounds of the group commit (commit.go), each batch taken
	// from its SKU's queue when its round starts.
	commits *committer
	// maxWait bounds a follower's wait, as LOCK_WAIT bounds a leader's; 0: none.
	maxWait time.Duration
	// leadFor bounds one consumer's lead of a SKU: leadFor by default.
	leadFor time.Duration
}

type skuQueue struct {
	waiting []*queued // arrival order, not yet taken into a batch
	leader  *queued
}

// queued is one order in the combiner.
type queued struct {
	msg   *message.Message
	order order.Order
	since time.Time
	taken bool // in a batch being decided
	// gaveUp is the error of a follower that gave up while its order was taken: should the batch come
	// back undecided (putBack), the order gets it rather than a second wait.
	gaveUp error
	waited time.Duration // from joining until its batch was decided
	// wake is a follower's (enqueue; nil for the order that leads on arrival), told once: its batch's outcome
	// (nil when decided, published and acked), or errLead: this order's consumer leads now.
	wake chan error
}

func newCombiner(maxWait time.Duration, commits *committer) *combiner {
	return &combiner{skus: make(map[string]*skuQueue), maxWait: maxWait, commits: commits, leadFor: leadFor}
}

// step is the combining step, between decode and the lock: a follower returns its order's outcome; the
// leader goes on to the lock and Handle, which decides the batches (lead).
func (c *combiner) step(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := OrderOf(msg)
		if err != nil || !o.Single() {
			return h(msg) // a basket or lifecycle event is decided alone
		}
		p := &queued{msg: msg, order: o, since: time.Now()}
		if !c.enqueue(p) {
			if leads, err := c.follow(p); !leads {
				return nil, err
			}
		}
		defer c.stepDown(p)
		orig := msg.Context()
		msg.SetContext(lockmw.WithWaitingSince(orig, p.since))
		defer msg.SetContext(orig)
		return h(msg)
	}
}

// putBack returns a batch that decided nothing to the head of its SKU's queue, in its order; a follower
// that gave up meanwhile gets its error instead, so no follower waits longer than its bound.
func (c *combiner) putBack(sku string, batch []*queued) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var back []*queued
	for _, p := range batch {
		p.taken = false
		if p.gaveUp != nil {
			p.wake <- p.gaveUp
			continue
		}
		back = append(back, p)
	}
	q := c.skus[sku]
	q.waiting = append(back, q.waiting...)
}

// enqueue queues p behind its SKU's orders; it reports whether p leads (no other order of the SKU does).
func (c *combiner) enqueue(p *queued) (leads bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	if q == nil {
		c.skus[p.order.SKU] = &skuQueue{waiting: []*queued{p}, leader: p}
		return true
	}
	p.wake = make(chan error, 1)
	q.waiting = append(q.waiting, p)
	return false
}

// follow waits until p's batch is decided or p leads; a follower that waited maxWait, or whose message
// context ended, gives up unless its order is being decided.
func (c *combiner) follow(p *queued) (leads bool, err error) {
	var timeout <-chan time.Time
	if c.maxWait > 0 {
		t := time.NewTimer(c.maxWait)
		defer t.Stop()
		timeout = t.C
	}
	ctx := p.msg.Context()
	select {
	case err := <-p.wake:
		return woken(err)
	case <-timeout:
		err = fmt.Errorf("lock %s: %w: %w", p.order.SKU, rlock.ErrNotObtained, errGaveUp)
	case <-ctx.Done():
		err = fmt.Errorf("lock %s: %w: %w", p.order.SKU, rlock.ErrNotObtained, context.Cause(ctx))
	}
	if c.leave(p, err) {
		return false, err
	}
	return woken(<-p.wake) // taken into a batch, or made leader, meanwhile
}

// leave takes a follower that gives up out of its SKU's queue; false when it cannot: its order is being
// decided, or it was just made leader.
func (c *combiner) leave(p *queued, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	if p.taken {
		p.gaveUp = err
	}
	if p.taken || q.leader == p {
		return false
	}
	q.waiting = slices.DeleteFunc(q.waiting, func(x *queued) bool { return x == p })
	return true
}

// stepDown ends p's lead: the oldest waiting order leads next, or the SKU leaves the combiner. p's own
// order leaves the queue if no batch took it (the lock was not obtained).
func (c *combiner) stepDown(p *queued) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.skus[p.order.SKU]
	q.waiting = slices.DeleteFunc(q.waiting, func(x *queued) bool { return x == p })
	if len(q.waiting) == 0 {
		delete(c.skus, p.order.SKU)
		return
	}
	q.leader = q.waiting[0]
	q.leader.wake <- errLead
}

// take removes up to inventory.MaxBatch waiting orders of sku, oldest first, for a batch.
func (c *combiner) take(sku string) []*queued {
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

// lead decides the batches of the leader msg's SKU in its section sec (nil: no lock, unfenced), oldest
// orders first, for at most leadFor (the first batch always runs: it holds the leader's own order, the
// oldest waiting), until one fails or finds the lock held; it returns the outcome of the leader's order. In
// an elided section a batch that finds the lock held goes back to the head of the queue (putBack) and ends
// the lead; if that was the first batch, lead returns lockmw.ErrLocked for the middleware to take the lock.
func (c *combiner) lead(msg *message.Message, sku string, sec *lockmw.Section) error {
	var fence int64
	switch {
	case sec == nil:
	case sec.Elided():
		fence = inventory.ElideLock
	default:
		fence = sec.Token(sku)
	}
	var own error
	done := false // the first batch, with the leader's order, was decided
	start := time.Now()
	for first := true; first || time.Since(start) < c.leadFor; first = false {
		batch, err := c.decideEach(msg, sku, fence)
		if len(batch) == 0 {
			break
		}
		if errors.Is(err, errTakeLock) {
			c.putBack(sku, batch)
			if !done {
				own = err
			}
			break
		}
		if !done {
			done, own = true, err
		}
		if err != nil {
			break
		}
	}
	if !done {
		return fmt.Errorf("%w: %w", lockmw.ErrLocked, cmp.Or(own, errTakeLock))
	}
	return own
}

// decideEach decides a batch of sku's waiting orders (taken when the group commit's round starts, so that it
// holds every order of the SKU waiting by then) and hands each order its outcome. A batch that failed permanently
// (one order's corrupt record, say) is decided again one order at a time, so that only the orders that
// fail on their own count the failure. A batch whose decision panicked fails with ErrPanicked (the
// committer recovers), every order of it, the leader's too.
func (c *combiner) decideEach(leader *message.Message, sku string, fence int64) ([]*queued, error) {
	batch, err := c.commits.decide(&commit{ctx: leader.Context(), sku: sku, fence: fence})
	switch oneByOne := len(batch) > 1 && inventory.IsPermanent(err); {
	case len(batch) == 0:
		return nil, nil
	case errors.Is(err, lockmw.ErrLocked) || oneByOne && fence == inventory.ElideLock:
		// Decided nothing: the batch goes back to be decided under the lock, where a batch that fails
		// permanently is decided order by order (an elided order could meet the lock taken meanwhile).
		return batch, fmt.Errorf("%w: %w", errTakeLock, err)
	case !oneByOne:
		c.decided(leader, batch, err)
		return batch, err
	}
	return batch, c.decideOneByOne(leader, batch, fence)
}

// decideOneByOne decides each order of batch alone and returns the leader's outcome.
func (c *combiner) decideOneByOne(leader *message.Message, batch []*queued, fence int64) (err error) {
	for _, p := range batch {
		single := []*queued{p}
		_, perr := c.commits.decide(&commit{ctx: leader.Context(), batch: single, fence: fence})
		c.decided(leader, single, perr)
		if p.msg == leader {
			err = perr
		}
	}
	return err
}

// decided hands a batch's outcome to its followers' consumers and records each follower's wait for its
// SKU when the leader runs in a section of the lock middleware (which records the leader's own).
func (c *combiner) decided(leader *message.Message, batch []*queued, err error) {
	sec, inSection := lockmw.SectionFrom(leader.Context())
	for _, p := range batch {
		if p.msg == leader {
			continue
		}
		if err == nil && inSection {
			sec.RecordWait(p.msg.Context(), lockmw.Wait{Keys: []string{p.order.SKU}, From: p.since,
				Until: p.since.Add(p.waited), Path: lockmw.PathBatched})
		}
		select { // once: a panic's second call finds the outcome already there
		case p.wake <- err:
		default:
		}
	}
}

// stamp notes how long each order of batch waited, until now: its batch is decided now.
func stamp(batch []*queued) {
	now := time.Now()
	for _, p := range batch {
		p.waited = now.Sub(p.since)
	}
}
