package handlers

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/order"
)

// The single-SKU orders of a SKU that arrive while another order of it is being decided in this process
// wait in the lock middleware's Batcher; the first one leads: it goes on to the lock middleware, which
// obtains the SKU's exclusive section, and in it Handle decides the SKU's waiting orders in batches of up
// to inventory.MaxBatch (lead), each batch taken from the Batcher when its commit round starts (commit.go),
// one stock script call in the round's pipeline and one commit call with the round's outcome events. A
// leader leads for at most leadFor, then hands the lead to the oldest waiting order, whose consumer obtains
// the section anew: the lock's hand-off bound (rlock.HandOff) then lets other processes have their turn. In
// an elided section (the lock taken inside each batch's script) a batch that finds the lock held goes back
// to the head of the queue, and the leader whose own order is still waiting returns lockmw.ErrLocked: the
// middleware then takes the lock.
//
// Every order gets the outcome it would have got alone (a batch decides in arrival order, as one call per
// order would), and a failed batch leaves every order of it to be retried, as a failed order is alone.

// leadFor is how long one consumer leads a SKU before handing the lead on: the lock's hand-off bound.
const leadFor = rlock.DefaultHandOffHold

// ErrPanicked is what the orders of a batch whose decision panicked get (commit.go): a failure that counts
// towards MAX_ATTEMPTS, so an order whose data makes the decision panic ends in the poison stream.
var ErrPanicked = errors.New("handlers: deciding the order's batch panicked")

// errNotQueued: a leader found its own order in no queue: the chain has no Config.Batcher ahead of the
// lock middleware and the handler.
var errNotQueued = errors.New("handlers: a single-SKU order reached the handler without waiting in the Batcher (Config.Batcher, ahead of the lock middleware)")

// errTakeLock: an elided batch decided nothing and goes back to be decided under the lock.
var errTakeLock = errors.New("handlers: the batch is to be decided under the lock")

// queued is one order of a batch: its message, and for a SKU's batch its place in the Batcher's queue.
type queued struct {
	msg    *message.Message
	order  order.Order
	waited time.Duration  // from joining until its batch was taken
	q      *lockmw.Queued // nil: decided alone (a basket, a lifecycle event)
}

// take takes a batch of sku's waiting orders from the Batcher. A message that waited there undecoded (a
// chain without delivery.Decoder ahead of the Batcher) fails as bad input at once.
func (h *Handler) take(sku string, leader *message.Message) []*queued {
	var batch []*queued
	for _, q := range h.cfg.Batcher.Take(sku, inventory.MaxBatch) {
		o, ok := order.FromContext(q.Msg.Context())
		if !ok {
			err := fmt.Errorf("%w: message %s was not decoded", order.ErrBadInput, q.Msg.UUID)
			h.cfg.Batcher.Done(sku, leader, []*lockmw.Queued{q}, err)
			continue
		}
		batch = append(batch, &queued{msg: q.Msg, order: o, waited: q.Taken.Sub(q.Since), q: q})
	}
	return batch
}

// places are the Batcher's queue places of batch.
func places(batch []*queued) []*lockmw.Queued {
	qs := make([]*lockmw.Queued, len(batch))
	for i, p := range batch {
		qs[i] = p.q
	}
	return qs
}

// lead decides the batches of the leader msg's SKU in its section sec (nil: no lock, unfenced), oldest
// orders first, for at most leadFor (the first batch always runs: it holds the leader's own order, the
// oldest waiting), until one fails or finds the lock held; it returns the outcome of the leader's order. In
// an elided section a batch that finds the lock held goes back to the head of the queue (Batcher.PutBack)
// and ends the lead; if that was the first batch, lead returns lockmw.ErrLocked for the middleware to take
// the lock.
func (h *Handler) lead(msg *message.Message, sku string, sec *lockmw.Section) error {
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
	for first := true; first || time.Since(start) < h.leadFor; first = false {
		batch, err := h.decideEach(msg, sku, fence)
		if len(batch) == 0 && first {
			return errNotQueued
		}
		if len(batch) == 0 {
			break
		}
		if errors.Is(err, errTakeLock) {
			h.cfg.Batcher.PutBack(sku, places(batch))
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
func (h *Handler) decideEach(leader *message.Message, sku string, fence int64) ([]*queued, error) {
	batch, err := h.committer.decide(&commit{ctx: leader.Context(), sku: sku, leader: leader, fence: fence})
	switch oneByOne := len(batch) > 1 && inventory.IsPermanent(err); {
	case len(batch) == 0:
		return nil, nil
	case errors.Is(err, lockmw.ErrLocked) || oneByOne && fence == inventory.ElideLock:
		// Decided nothing: the batch goes back to be decided under the lock, where a batch that fails
		// permanently is decided order by order (an elided order could meet the lock taken meanwhile).
		return batch, fmt.Errorf("%w: %w", errTakeLock, err)
	case !oneByOne:
		h.cfg.Batcher.Done(sku, leader, places(batch), err)
		return batch, err
	}
	return batch, h.decideOneByOne(leader, sku, batch, fence)
}

// decideOneByOne decides each order of batch alone and returns the leader's outcome.
func (h *Handler) decideOneByOne(leader *message.Message, sku string, batch []*queued, fence int64) (err error) {
	for _, p := range batch {
		single := []*queued{p}
		_, perr := h.committer.decide(&commit{ctx: leader.Context(), batch: single, fence: fence})
		h.cfg.Batcher.Done(sku, leader, places(single), perr)
		if p.msg == leader {
			err = perr
		}
	}
	return err
}
