package rlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// receiveOn hands the messages and confirmations of ps to receive until ps is closed.
func (n *notifier) receiveOn(ps *redis.PubSub) *conn {
	c := &conn{ps: ps, opened: time.Now()}
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() {
		for {
			select {
			case <-n.done:
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				n.receive(c, m)
			}
		}
	}()
	return c
}

func (n *notifier) receive(c *conn, m any) {
	switch m := m.(type) {
	case *redis.Message:
		n.onMessage(m.Channel)
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			// Every confirmation counts as a possible unlock: one published before the subscription took
			// effect (or during a reconnect) was not seen, and the head that attempted then may not have
			// been the one that waited for this confirmation.
			n.confirm(c, m.Channel)
			n.onMessage(m.Channel)
		case "sunsubscribe":
			n.dropped(c, m.Channel)
		}
	}
}

// confirm marks channel subscribed, unless c is a connection closed since: its confirmation is not the
// current subscription's.
func (n *notifier) confirm(c *conn, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[n.connKey(channel)] != c {
		return
	}
	c.confirmed = true
	if s := n.chans[channel]; s != nil && !s.confirmed {
		s.confirmed = true
		close(s.ready)
	}
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
	if n.perChannel {
		n.writeOwn(c)
		return
	}
	n.writeShared(c)
}

// writeShared sends c on the shared connection.
func (n *notifier) writeShared(c command) {
	n.mu.Lock()
	shared := n.conns[""]
	n.mu.Unlock()
	if shared == nil { // closed
		return
	}
	ps := shared.ps
	if c.op == unsubscribe {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.pick(ps.Unsubscribe, ps.SUnsubscribe)(ctx, c.channels...)
		return
	}
	// Not a waiter's context: a write cut off by its deadline would tear down the connection that every
	// key shares. A failed write is retried by go-redis on reconnect (it resubscribes every channel); the
	// waiter meanwhile falls back to polling at the lock's TTL.
	_ = n.pick(ps.Subscribe, ps.SSubscribe)(context.Background(), c.channels...)
}

// pick returns the sharded command when the notifier is sharded, the plain one otherwise.
func (n *notifier) pick(plain, sharded func(context.Context, ...string) error) func(context.Context, ...string) error {
	if n.sharded {
		return sharded
	}
	return plain
}
