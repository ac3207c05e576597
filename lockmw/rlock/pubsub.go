package rlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// unsubscribeAfter is how long a channel stays subscribed with no waiter. A hot key keeps its
// subscription between bursts instead of paying SUBSCRIBE, its confirmation and UNSUBSCRIBE every time.
const unsubscribeAfter = 5 * time.Second

// notifier owns the one pub/sub connection of a locker to one Redis server. Waiters of a key share one
// subscription to its unlock channel; every message (and every resubscription after a reconnect, when
// messages may have been lost) is handed to onMessage.
//
// The mutex guards only the subscriptions in memory; SUBSCRIBE and UNSUBSCRIBE are sent by one goroutine,
// in the order the subscriptions changed. An UNSUBSCRIBE of an idle channel thus reaches Redis before the
// SUBSCRIBE of a waiter that arrived after it, and never undoes that waiter's subscription. A confirmation
// may come early (go-redis resubscribing, after a reconnect, a channel whose UNSUBSCRIBE is still queued);
// the SUBSCRIBE queued behind that UNSUBSCRIBE is confirmed again, and every confirmation wakes the key's
// queue, so an unlock published in between is not missed.
type notifier struct {
	ps        *redis.PubSub
	onMessage func(channel string)
	done      chan struct{}
	closeOnce sync.Once
	outbox    chan struct{} // signalled when commands are queued

	mu     sync.Mutex
	chans  map[string]*subscription
	queued []command // to send, oldest first
}

type subscription struct {
	refs      int
	ready     chan struct{} // closed when Redis confirmed the subscription
	confirmed bool
	idleSince time.Time
}

// command is a SUBSCRIBE (or an UNSUBSCRIBE) of channels.
type command struct {
	unsubscribe bool
	channels    []string
}

func newNotifier(rdb redis.UniversalClient, onMessage func(string)) *notifier {
	n := &notifier{
		ps:        rdb.Subscribe(context.Background()),
		onMessage: onMessage,
		chans:     make(map[string]*subscription),
		done:      make(chan struct{}),
		outbox:    make(chan struct{}, 1),
	}
	go n.run()
	go n.send()
	return n
}

// hold subscribes to channel (or shares its subscription) and returns a channel closed once Redis
// confirmed it: from then on no unlock message can slip by unseen.
func (n *notifier) hold(channel string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	if s == nil {
		s = &subscription{ready: make(chan struct{})}
		n.chans[channel] = s
		n.queueLocked(command{channels: []string{channel}})
	}
	s.refs++
	return s.ready
}

// drop releases a hold. The subscription is dropped lazily by sweep.
func (n *notifier) drop(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.chans[channel]; s != nil {
		s.refs--
		if s.refs == 0 {
			s.idleSince = time.Now()
		}
	}
}

// subscribed reports whether Redis confirmed a subscription to channel that is still kept.
func (n *notifier) subscribed(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	return s != nil && s.confirmed
}

func (n *notifier) close() error {
	var err error
	n.closeOnce.Do(func() {
		close(n.done)
		err = n.ps.Close()
	})
	return err
}

// run hands the messages and confirmations to onMessage, and unsubscribes idle channels.
func (n *notifier) run() {
	msgs := n.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	sweep := time.NewTicker(unsubscribeAfter)
	defer sweep.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-sweep.C:
			n.sweep()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			n.receive(m)
		}
	}
}

func (n *notifier) receive(m any) {
	switch m := m.(type) {
	case *redis.Message:
		n.onMessage(m.Channel)
	case *redis.Subscription:
		// Every confirmation counts as a possible unlock: one published before the subscription took
		// effect (or during a reconnect) was not seen, and the head that attempted then may not have been
		// the one that waited for this confirmation.
		if m.Kind == "subscribe" {
			n.confirm(m.Channel)
			n.onMessage(m.Channel)
		}
	}
}

// confirm marks channel subscribed.
func (n *notifier) confirm(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.chans[channel]; s != nil && !s.confirmed {
		s.confirmed = true
		close(s.ready)
	}
}

// sweep unsubscribes the channels nobody waited for since unsubscribeAfter.
func (n *notifier) sweep() {
	n.mu.Lock()
	defer n.mu.Unlock()
	var idle []string
	for ch, s := range n.chans {
		if s.idle() {
			idle = append(idle, ch)
			delete(n.chans, ch)
		}
	}
	if len(idle) > 0 {
		n.queueLocked(command{unsubscribe: true, channels: idle})
	}
}

// idle: no waiter since unsubscribeAfter. Only confirmed ones: a late confirmation must never be taken for
// a newer subscription's.
func (s *subscription) idle() bool {
	return s.refs == 0 && s.confirmed && time.Since(s.idleSince) >= unsubscribeAfter
}

// queueLocked queues c behind the commands of earlier changes.
func (n *notifier) queueLocked(c command) {
	n.queued = append(n.queued, c)
	signal(n.outbox)
}

// send sends the queued commands to Redis, in order, outside the mutex.
func (n *notifier) send() {
	for {
		select {
		case <-n.done:
			return
		case <-n.outbox:
			for _, c := range n.takeQueued() {
				n.write(c)
			}
		}
	}
}

func (n *notifier) takeQueued() []command {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.queued
	n.queued = nil
	return cs
}

func (n *notifier) write(c command) {
	if c.unsubscribe {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.ps.Unsubscribe(ctx, c.channels...)
		return
	}
	// Not a waiter's context: a write cut off by its deadline would tear down the connection that every
	// key shares. A failed write is retried by go-redis on reconnect (it resubscribes every channel); the
	// waiter meanwhile falls back to polling at the lock's TTL.
	_ = n.ps.Subscribe(context.Background(), c.channels...)
}
