package rlock

import (
	"slices"
	"sync"
	"time"
)

// waitQueue queues the waiters of each key inside one process, first come first served. Only the head of a
// key's queue talks to Redis; the others sleep until they become head. An unlock message wakes the head
// alone, so one unlock costs one attempt per process instead of one per waiting goroutine.
type waitQueue struct {
	mu   sync.Mutex
	keys map[string]*keyQueue // by unlock channel
	// yields: this process freed the lock while another process listened for it; until then no
	// acquisition here attempts (also one that arrives after, with no queue yet), so that process gets
	// its turn.
	yields map[string]time.Time
}

type keyQueue struct {
	waiters []*waiter // waiters[0] is the head
	// pending: an unlock message arrived that the head has not acted on yet. It survives a change of head,
	// so a message that lands between two heads is not lost.
	pending bool
}

type waiter struct {
	owner string
	// wake carries "look again": an unlock message for the key, or this waiter became head.
	wake chan struct{}
	// tryNow: became head because the previous head gave up (not because it took the lock), so the lock
	// may be free and no unlock message will come for it.
	tryNow bool
	// granted: the hold a releasing holder handed to this waiter (the head), not yet taken.
	granted *hold
}

// turn is what a waiter of the queue should do now.
type turn struct {
	head, try bool
	granted   *hold     // take this hold: the lock was handed over here
	notBefore time.Time // attempt no earlier (a yield)
}

func newWaitQueue() *waitQueue {
	return &waitQueue{keys: make(map[string]*keyQueue), yields: make(map[string]time.Time)}
}

// busy reports whether some goroutine of this process waits for the key: a newcomer queues behind it
// instead of racing it in Redis.
func (q *waitQueue) busy(channel string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.keys[channel] != nil || q.yieldingLocked(channel)
}

// yieldingLocked reports whether the key is in a yield, forgetting one that ended.
func (q *waitQueue) yieldingLocked(channel string) bool {
	until, ok := q.yields[channel]
	if ok && !time.Now().Before(until) {
		delete(q.yields, channel)
		return false
	}
	return ok
}

// join appends a waiter for the key. first reports that the key had no queue, so the caller subscribes to
// its unlock channel.
func (q *waitQueue) join(channel, owner string) (w *waiter, first bool) {
	w = &waiter{owner: owner, wake: make(chan struct{}, 1), tryNow: true}
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[channel]
	if kq == nil {
		kq = &keyQueue{}
		q.keys[channel] = kq
		first = true
	}
	kq.waiters = append(kq.waiters, w)
	return w, first
}

// turn tells waiter w whether it heads its queue and, if so, whether it should act now: take the hold
// handed to it, or attempt because it was just promoted past a head that gave up or an unlock message
// arrived. It consumes the last two.
func (q *waitQueue) turn(channel string, w *waiter) turn {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[channel]
	if kq == nil || kq.waiters[0] != w {
		return turn{}
	}
	t := turn{head: true, try: w.tryNow || kq.pending || w.granted != nil, granted: w.granted, notBefore: q.yields[channel]}
	w.tryNow, kq.pending, w.granted = false, false, nil
	return t
}

// grant hands hold h to the head of its key's queue, unless nobody waits; it returns that waiter.
func (q *waitQueue) grant(channel string, h *hold) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[channel]
	if kq == nil {
		return nil
	}
	w := kq.waiters[0]
	w.granted = h
	signal(w.wake)
	return w
}

// yield makes acquisitions of the key here attempt no earlier than d from now, and wakes its head.
func (q *waitQueue) yield(channel string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.yields[channel] = time.Now().Add(d)
	if kq := q.keys[channel]; kq != nil {
		kq.pending = true
		signal(kq.waiters[0].wake)
	}
}

// retryLater makes the head attempt at its next turn (its fallback timer fired).
func (q *waitQueue) retryLater(w *waiter) {
	q.mu.Lock()
	w.tryNow = true
	q.mu.Unlock()
}

// leave removes w. If w was head, the next waiter becomes head; it attempts at once only when w did not
// take the lock (a lock taken by w will announce its release, or hand it on), or when w's owner is its
// own: then it re-enters. last reports that the queue is now empty; abandoned is a hold handed to w that w
// did not take, for the caller to pass on.
func (q *waitQueue) leave(channel string, w *waiter, acquired bool) (last bool, abandoned *hold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	abandoned, w.granted = w.granted, nil
	kq := q.keys[channel]
	i := slices.Index(kq.waiters, w)
	if i < 0 {
		return false, abandoned
	}
	kq.waiters = slices.Delete(kq.waiters, i, i+1)
	if len(kq.waiters) == 0 {
		delete(q.keys, channel)
		return true, abandoned
	}
	if i == 0 {
		next := kq.waiters[0]
		next.tryNow = !acquired || next.owner == w.owner
		signal(next.wake)
	}
	return false, abandoned
}

// notify records an unlock message (or a possible lost one) for the key and wakes its head.
func (q *waitQueue) notify(channel string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kq := q.keys[channel]; kq != nil {
		kq.pending = true
		signal(kq.waiters[0].wake)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
