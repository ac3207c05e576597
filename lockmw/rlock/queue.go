package rlock

import "sync"

// waitQueue queues the waiters of each key inside one process, first come first served. Only the head of a
// key's queue talks to Redis; the others sleep until they become head. An unlock message wakes the head
// alone, so one unlock costs one attempt per process instead of one per waiting goroutine.
type waitQueue struct {
	mu   sync.Mutex
	keys map[string]*keyQueue // by unlock channel
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
}

func newWaitQueue() *waitQueue { return &waitQueue{keys: make(map[string]*keyQueue)} }

// busy reports whether some goroutine of this process waits for the key: a newcomer queues behind it
// instead of racing it in Redis.
func (q *waitQueue) busy(channel string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.keys[channel] != nil
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

// turn tells waiter w whether it heads its queue and, if so, whether it should attempt now: because it
// was just promoted past a head that gave up, or because an unlock message arrived. It consumes both.
func (q *waitQueue) turn(channel string, w *waiter) (head, try bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[channel]
	if kq == nil || kq.waiters[0] != w {
		return false, false
	}
	try = w.tryNow || kq.pending
	w.tryNow, kq.pending = false, false
	return true, try
}

// retryLater makes the head attempt at its next turn (its fallback timer fired).
func (q *waitQueue) retryLater(w *waiter) {
	q.mu.Lock()
	w.tryNow = true
	q.mu.Unlock()
}

// leave removes w. If w was head, the next waiter becomes head; it attempts at once only when w did not
// take the lock (a lock taken by w will announce its release), or when w's owner is its own: then it
// re-enters. last reports that the queue is now empty.
func (q *waitQueue) leave(channel string, w *waiter, acquired bool) (last bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[channel]
	for i, x := range kq.waiters {
		if x != w {
			continue
		}
		kq.waiters = append(kq.waiters[:i], kq.waiters[i+1:]...)
		if len(kq.waiters) == 0 {
			delete(q.keys, channel)
			return true
		}
		if i == 0 {
			next := kq.waiters[0]
			next.tryNow = !acquired || next.owner == w.owner
			signal(next.wake)
		}
		return false
	}
	return false
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
