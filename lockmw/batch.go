package lockmw

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/lockmw/rlock"
)

// Batcher is the batched way into a section (PathBatched), a step ahead of the middleware: messages of one
// key that arrive while another message of that key is handled in this process wait here and are handled
// in that one's section, in batches (flat combining: Hendler, Incze, Shavit and Tzafrir, SPAA 2010). One
// message per key leads at a time: it goes on to the middleware, which obtains the key's section, and in it
// the handler takes the waiting messages in batches (Take) and hands each batch its outcome (Done). The
// others follow: they wait here, without taking the lock, until a batch decided them or they lead. When
// the leader's handler returns, the oldest waiting message leads next: it obtains the section anew, so the
// lock's hand-off bound (rlock.HandOff) lets other processes have their turn. A handler should lead for at
// most about rlock.DefaultHandOffHold. Only a message whose context says MayBatch for one key (WithKeys)
// waits here; any other passes through.
//
// The leader's handler must settle every batch it takes before it returns: Done (the batch was handled:
// its followers return the outcome given) or PutBack (it was not: its messages wait again, the leader's
// own among them). A follower taken into a batch waits for that, without a bound of its own.
//
// The zero Batcher is ready to use.
type Batcher struct {
	// MaxWait bounds how long a follower waits for a batch to take it, as the locker's MaxWait bounds a lock
	// wait; then it fails with rlock.ErrNotObtained. 0: no bound.
	MaxWait time.Duration

	mu   sync.Mutex
	keys map[string]*keyQueue // a key is here while one of its messages leads
}

type keyQueue struct {
	waiting []*Queued // arrival order, not yet taken into a batch
	leader  *Queued
}

// Queued is a message waiting in its key's queue, the leader's own included.
type Queued struct {
	Msg   *message.Message
	Since time.Time // when it joined the queue
	Taken time.Time // when a batch took it (Take)
	taken bool      // in a batch being handled
	// gaveUp is the error of a follower that gave up while its message was taken: should the batch come
	// back unhandled (PutBack), the message gets it rather than a second wait.
	gaveUp error
	// wake is a follower's (nil for the message that leads on arrival), told once: its batch's outcome,
	// or errLead: it leads now.
	wake chan error
}

// ErrGaveUp is wrapped, with rlock.ErrNotObtained, by the error of a follower that waited for a batch as
// long as it may wait for the lock (Batcher.MaxWait).
var ErrGaveUp = errors.New("lockmw: waited the lock wait for a batch to handle the message")

// errLead wakes a follower to lead its key (stepDown).
var errLead = errors.New("lockmw: lead")

// woken reads what woke a follower: it leads now (errLead), or its batch's outcome.
func woken(err error) (leads bool, outcome error) {
	if err == errLead {
		return true, nil
	}
	return false, err
}

// Middleware is the batching step: a follower returns its message's outcome; the leader goes on to h (the
// lock middleware, then the handler), which handles the batches.
func (b *Batcher) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		keys, ways, _ := KeysFrom(msg.Context())
		if ways&MayBatch == 0 || len(keys) != 1 {
			return h(msg)
		}
		key := keys[0]
		p := &Queued{Msg: msg, Since: time.Now()}
		if !b.enqueue(key, p) {
			if leads, err := b.follow(key, p); !leads {
				return nil, err
			}
		}
		defer b.stepDown(key, p)
		orig := msg.Context()
		msg.SetContext(withWaitingSince(orig, p.Since))
		defer msg.SetContext(orig)
		return h(msg)
	}
}

// enqueue queues p behind its key's messages; it reports whether p leads (no other message of the key does).
func (b *Batcher) enqueue(key string, p *Queued) (leads bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.keys[key]
	if q == nil {
		if b.keys == nil {
			b.keys = make(map[string]*keyQueue)
		}
		b.keys[key] = &keyQueue{waiting: []*Queued{p}, leader: p}
		return true
	}
	p.wake = make(chan error, 1)
	q.waiting = append(q.waiting, p)
	return false
}

// follow waits until p's batch is handled or p leads; a follower that waited MaxWait, or whose message
// context ended, gives up unless its message is being handled.
func (b *Batcher) follow(key string, p *Queued) (leads bool, err error) {
	var timeout <-chan time.Time
	if b.MaxWait > 0 {
		t := time.NewTimer(b.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	ctx := p.Msg.Context()
	select {
	case err := <-p.wake:
		return woken(err)
	case <-timeout:
		err = fmt.Errorf("lock %s: %w: %w", key, rlock.ErrNotObtained, ErrGaveUp)
	case <-ctx.Done():
		err = fmt.Errorf("lock %s: %w: %w", key, rlock.ErrNotObtained, context.Cause(ctx))
	}
	if b.leave(key, p, err) {
		return false, err
	}
	return woken(<-p.wake) // taken into a batch, or made leader, meanwhile
}

// leave takes a follower that gives up out of its key's queue; false when it cannot: its message is being
// handled, or it was just made leader.
func (b *Batcher) leave(key string, p *Queued, err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.keys[key]
	if p.taken {
		p.gaveUp = err
	}
	if p.taken || q.leader == p {
		return false
	}
	q.waiting = slices.DeleteFunc(q.waiting, func(x *Queued) bool { return x == p })
	return true
}

// stepDown ends p's lead: the oldest waiting message leads next, or the key leaves the batcher. p's own
// message leaves the queue if no batch took it (the section was not obtained).
func (b *Batcher) stepDown(key string, p *Queued) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.keys[key]
	q.waiting = slices.DeleteFunc(q.waiting, func(x *Queued) bool { return x == p })
	if len(q.waiting) == 0 {
		delete(b.keys, key)
		return
	}
	q.leader = q.waiting[0]
	q.leader.wake <- errLead
}

// Take removes up to n waiting messages of key, oldest first, for a batch the leader handles now: the
// first batch of a lead holds the leader's own message (the oldest waiting).
func (b *Batcher) Take(key string, n int) []*Queued {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.keys[key]
	if q == nil {
		return nil
	}
	batch := slices.Clone(q.waiting[:min(len(q.waiting), n)])
	q.waiting = q.waiting[len(batch):]
	now := time.Now()
	for _, p := range batch {
		p.taken, p.Taken = true, now
	}
	return batch
}

// PutBack returns a batch that was not handled (its write found the lock held, say) to the head of its
// key's queue, in its order; a follower that gave up meanwhile gets its error instead, so no follower
// waits longer than its bound.
func (b *Batcher) PutBack(key string, batch []*Queued) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.keys[key]
	if q == nil {
		return // the key's leader stepped down: nothing of it was taken
	}
	var back []*Queued
	for _, p := range batch {
		p.taken = false
		if p.gaveUp != nil {
			select { // once: a message put back twice, or after Done, is told nothing more
			case p.wake <- p.gaveUp:
			default:
			}
			continue
		}
		back = append(back, p)
	}
	q.waiting = append(back, q.waiting...)
}

// Done hands a batch's outcome to its followers, and records each follower's wait for key (PathBatched:
// from joining until its batch was taken) when the leader runs in a section of the middleware, which
// records the leader's own. A leader whose orders have outcomes of their own calls it for each of them
// (batch a part of the batch taken).
func (b *Batcher) Done(key string, leader *message.Message, batch []*Queued, err error) {
	sec, inSection := SectionFrom(leader.Context())
	for _, p := range batch {
		if p.Msg == leader {
			continue
		}
		if err == nil && inSection {
			sec.RecordWait(p.Msg.Context(), Wait{Keys: []string{key}, From: p.Since, Until: p.Taken, Path: PathBatched})
		}
		select { // a follower's outcome is handed over once (wake holds one)
		case p.wake <- err:
		default:
		}
	}
}

// Waiting is how many messages of key wait for a batch, the leader's own included until a batch takes it.
func (b *Batcher) Waiting(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.keys[key]; q != nil {
		return len(q.waiting)
	}
	return 0
}
