package rlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// unsubscribeAfter is how long a channel stays subscribed with no waiter. A hot key keeps its
// subscription between bursts instead of paying SUBSCRIBE, its confirmation and UNSUBSCRIBE every time.
const unsubscribeAfter = 5 * time.Second

// notifier owns the pub/sub connections of a locker to one Redis (a server, or a cluster). Waiters of a
// key share one subscription to its unlock channel; every message (and every resubscription after a
// reconnect, when messages may have been lost) is handed to onMessage.
//
// The mutex guards only the subscriptions in memory; SUBSCRIBE and UNSUBSCRIBE are sent by one goroutine,
// in the order the subscriptions changed. An UNSUBSCRIBE of an idle channel thus reaches Redis before the
// SUBSCRIBE of a waiter that arrived after it, and never undoes that waiter's subscription. A confirmation
// may come early (go-redis resubscribing, after a reconnect, a channel whose UNSUBSCRIBE is still queued);
// the SUBSCRIBE queued behind that UNSUBSCRIBE is confirmed again, and every confirmation wakes the key's
// queue, so an unlock published in between is not missed.
//
// Plain channels (SUBSCRIBE), and sharded ones (SSUBSCRIBE) on a single server, share one connection. On a
// Redis Cluster a sharded channel is served by the master of its slot alone, and go-redis opens a pub/sub
// connection on the node of its first channel's slot: each channel gets a connection of its own
// (shard.go), on the master of its slot, which go-redis follows to the new master after a failover.
type notifier struct {
	rdb        redis.UniversalClient
	sharded    bool // SSUBSCRIBE, not SUBSCRIBE
	perChannel bool // sharded on a Redis Cluster: a connection per channel
	onMessage  func(channel string)
	done       chan struct{}
	closeOnce  sync.Once
	outbox     chan struct{} // signalled when commands are queued

	mu     sync.Mutex
	chans  map[string]*subscription
	queued []command        // to send, oldest first
	conns  map[string]*conn // by channel; the shared connection under ""
	closed bool
}

type subscription struct {
	refs      int
	ready     chan struct{} // closed when Redis confirmed the subscription
	confirmed bool
	idleSince time.Time
}

// conn is one pub/sub connection of a notifier.
type conn struct {
	ps        *redis.PubSub
	opened    time.Time
	confirmed bool   // Redis confirmed a subscription on it
	node      string // a channel's own connection: the address of the master it was opened on
}

// command is a SUBSCRIBE (or an UNSUBSCRIBE, or a new connection) of channels.
type command struct {
	op       op
	channels []string
}

type op int

const (
	subscribe   op = iota
	unsubscribe    // idle channels
	resubscribe    // a channel's own connection, opened anew (shard.go)
)

// newNotifier returns a notifier of plain channels (SUBSCRIBE), with its connection.
func newNotifier(rdb redis.UniversalClient, onMessage func(string)) *notifier {
	return startNotifier(rdb, false, onMessage)
}

// startNotifier returns a notifier of sharded channels (SSUBSCRIBE) when sharded, plain ones otherwise.
// Its shared connection is opened at once; a channel's own connection when the channel is subscribed.
func startNotifier(rdb redis.UniversalClient, sharded bool, onMessage func(string)) *notifier {
	_, cluster := rdb.(*redis.ClusterClient)
	n := &notifier{
		rdb:        rdb,
		sharded:    sharded,
		perChannel: sharded && cluster,
		onMessage:  onMessage,
		chans:      make(map[string]*subscription),
		conns:      make(map[string]*conn),
		done:       make(chan struct{}),
		outbox:     make(chan struct{}, 1),
	}
	if !n.perChannel {
		open := rdb.Subscribe
		if sharded {
			open = rdb.SSubscribe
		}
		n.conns[""] = n.receiveOn(open(context.Background()))
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
		n.queueLocked(command{op: subscribe, channels: []string{channel}})
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
	var errs []error
	n.closeOnce.Do(func() {
		close(n.done)
		n.mu.Lock()
		n.closed = true
		conns := n.conns
		n.conns = nil
		n.mu.Unlock()
		for _, c := range conns {
			errs = append(errs, c.ps.Close())
		}
	})
	return errors.Join(errs...)
}

// run unsubscribes idle channels, and on a cluster moves the channels' own connections whose slot moved.
func (n *notifier) run() {
	sweep := time.NewTicker(unsubscribeAfter)
	defer sweep.Stop()
	recheck := time.NewTicker(confirmWithin)
	defer recheck.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-recheck.C:
			n.resubscribeMoved()
		case <-sweep.C:
			n.sweep()
		}
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
		n.queueLocked(command{op: unsubscribe, channels: idle})
	}
	n.retryUnconfirmedLocked()
}

// idle: no waiter since unsubscribeAfter. Only confirmed ones: a late confirmation must never be taken for
// a newer subscription's.
func (s *subscription) idle() bool {
	return s.refs == 0 && s.confirmed && time.Since(s.idleSince) >= unsubscribeAfter
}

// queue queues c behind the commands of earlier changes.
func (n *notifier) queue(c command) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queueLocked(c)
}

func (n *notifier) queueLocked(c command) {
	n.queued = append(n.queued, c)
	signal(n.outbox)
}
