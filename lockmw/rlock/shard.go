package rlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded unlock messages on a Redis Cluster. An SPUBLISH reaches the subscribers on the master of the
// channel's slot only (a PUBLISH is broadcast to every node over the cluster bus), and one SSUBSCRIBE may
// name channels of one slot only. go-redis opens a cluster pub/sub connection on the master of its first
// channel's slot, and after a reconnect on the slot's master of the moment, resubscribing its channels.
// So each channel gets a connection of its own: opened when the channel is subscribed, closed (which
// unsubscribes it) when it is not any more. A locker keeps as many as keys with waiters, and those idle for
// less than unsubscribeAfter.
//
// A node that loses a slot while its connections stay open (resharding, a manual failover) ends their
// sharded subscriptions itself, with an SUNSUBSCRIBE. The notifier never sends one on a channel's own
// connection, so such an SUNSUBSCRIBE is the node's: the channel is subscribed again on a new connection
// once the client learned where the slot went.

const (
	// resubscribeAfter is how long a channel dropped by its node waits for a new connection: the client
	// meanwhile reloads its slot map.
	resubscribeAfter = 100 * time.Millisecond
	// confirmWithin is how long a channel's connection may stay unconfirmed before the sweep opens it anew:
	// a node that no longer serves the slot answers MOVED, which go-redis does not follow on pub/sub.
	confirmWithin = time.Second
)

// connKey is the key of channel's connection in conns.
func (n *notifier) connKey(channel string) string {
	if n.perChannel {
		return channel
	}
	return ""
}

// writeOwn carries out c on the channels' own connections.
func (n *notifier) writeOwn(c command) {
	for _, channel := range c.channels {
		n.closeOwn(channel)
		if c.op == subscribe || (c.op == resubscribe && n.kept(channel)) {
			n.openOwn(channel)
		}
	}
}

// openOwn opens channel's connection, subscribed to it. The SSUBSCRIBE goes first: it makes go-redis
// connect to the slot's master, where a read would connect to any node.
func (n *notifier) openOwn(channel string) {
	node := n.masterOf(channel)
	ps := n.rdb.SSubscribe(context.Background(), channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		_ = ps.Close()
		return
	}
	c := n.receiveOn(ps)
	c.node = node
	n.conns[channel] = c
}

// masterOf is the address of the master of channel's slot as the cluster client knows it now; "" when
// the client is not a cluster's or does not know.
func (n *notifier) masterOf(channel string) string {
	cluster, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m, err := cluster.MasterForKey(ctx, channel)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// resubscribeMoved opens anew the channels' own connections whose slot has another master now (a
// failover): a demoted master does not always drop its sharded subscriptions, and does not get the new
// master's unlock messages. The new subscription's confirmation counts as a possible unlock, so a waiter
// that missed one meanwhile tries again.
func (n *notifier) resubscribeMoved() {
	if !n.perChannel {
		return
	}
	n.mu.Lock()
	nodes := make(map[string]string, len(n.conns))
	for channel, c := range n.conns {
		if c.node != "" && n.chans[channel] != nil {
			nodes[channel] = c.node
		}
	}
	n.mu.Unlock()
	for channel, node := range nodes {
		if now := n.masterOf(channel); now != "" && now != node {
			n.queue(command{op: resubscribe, channels: []string{channel}})
		}
	}
}

func (n *notifier) closeOwn(channel string) {
	n.mu.Lock()
	c := n.conns[channel]
	delete(n.conns, channel)
	n.mu.Unlock()
	if c != nil {
		_ = c.ps.Close()
	}
}

// kept reports whether channel is still subscribed in memory.
func (n *notifier) kept(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.chans[channel] != nil
}

// dropped takes in an SUNSUBSCRIBE that came on c. On a channel's own connection it is the node's: an
// unlock published since went unseen, so it counts as one, and the channel is subscribed again.
func (n *notifier) dropped(c *conn, channel string) {
	n.mu.Lock()
	current := n.perChannel && n.conns[channel] == c && n.chans[channel] != nil
	n.mu.Unlock()
	if !current {
		return
	}
	n.onMessage(channel)
	if cluster, ok := n.rdb.(*redis.ClusterClient); ok {
		cluster.ReloadState(context.Background())
	}
	time.AfterFunc(resubscribeAfter, func() { n.queue(command{op: resubscribe, channels: []string{channel}}) })
}

// retryUnconfirmedLocked opens anew the channels' own connections that Redis did not confirm in time.
func (n *notifier) retryUnconfirmedLocked() {
	if !n.perChannel {
		return
	}
	for channel, c := range n.conns {
		if !c.confirmed && time.Since(c.opened) >= confirmWithin && n.chans[channel] != nil {
			n.queueLocked(command{op: resubscribe, channels: []string{channel}})
		}
	}
}
