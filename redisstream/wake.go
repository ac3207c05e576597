package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// idlePoll is how often a subscriber waiting for keyspace events reads anyway: an event is lost when its
// connection breaks, and none is sent when a lost group is created again.
const idlePoll = 2 * time.Second

// subscribeTimeout bounds the wait for Redis to confirm a subscription.
const subscribeTimeout = time.Second

// A doorbell tells an idle subscriber that an entry was added to a partition: Redis publishes a keyspace
// event "xadd" on __keyspace@<db>__:<stream> for every XADD (notify-keyspace-events K and t), a message that
// carries no payload, so the subscriber then fetches the entries with fetch.lua, which keeps oversized ones
// from it. It is subscribed only while the subscriber is idle (arm), and not while the partitions have
// entries (disarm), when every XADD would cost Redis a message to each worker for nothing. While it is
// subscribed the subscriber reads only the partitions it wants: those whose event came, those whose last
// read came back full, and every partition right after subscribing and every idlePoll (an event is lost
// when a connection breaks, and none is sent when a lost group is created again).
//
// Only one worker can have an entry (the group hands it to one consumer), so were every idle worker to
// hear every event and read, an entry added while W workers idle would cost Redis W messages and W reads,
// W-1 of them empty (a herd). So each partition has bellOwners owners among the group's live consumers
// (owners, by rendezvous hashing), and a worker subscribes only to the events of the partitions it owns,
// and to the group's backlog channel: a worker whose read comes back full (more entries than it has room
// for) publishes there (askHelp), which makes every idle worker read every partition. Every worker still
// reads every partition every idlePoll, which covers a partition whose owners died until the others count
// them out.
type doorbell struct {
	rdb    redis.UniversalClient
	ring   chan struct{}  // an event came, or a subscription broke
	wanted []atomic.Bool  // by partition: to be read while subscribed (wantedOf)
	index  map[string]int // partition by keyspace channel
	all    atomic.Int64   // when every partition was last wanted (unix ns)
	subs   []*bellSub
	logger *slog.Logger
	armed  bool
	stop   context.CancelFunc
	owners *owners
	// watched is closed when the owners' watch has ended (and taken this consumer out of the live ones).
	watched chan struct{}
	backlog string    // the group's backlog channel (BacklogChannel)
	helped  time.Time // when it last asked for help (askHelp)
	// manage: the doorbell turns the events on itself (KeyspaceEventsAuto), at first and after a broken
	// connection (Redis may have restarted without them); enabled says they were turned on since.
	manage  bool
	enabled atomic.Bool
	off     bool // they could not be turned on: the subscriber polls
	// sweeping: the partitions are being read because every idlePoll all of them are (wantedOf), not
	// because events came; entries found then may be entries whose events never came (found).
	sweeping bool
}

// bellSub is one subscription: of the partitions on one Redis; on a cluster one per partition, on the
// node of its stream (the channel has the stream's hash tag, hence its slot). The first one also carries
// the backlog channel.
type bellSub struct {
	ps         *redis.PubSub
	channels   []string // by partition of parts
	parts      []int
	subscribed []string     // what arm subscribed to: the owned partitions' channels (the read loop's)
	count      atomic.Int64 // len(subscribed), for the receiver
	receiving  sync.Once
	confirmed  chan struct{} // every channel is subscribed
}

// KeyspaceChannel is the channel of the keyspace events of key in database db.
func KeyspaceChannel(db int, key string) string { return fmt.Sprintf("__keyspace@%d__:%s", db, key) }

func newDoorbell(ctx context.Context, rdb redis.UniversalClient, cfg readerConfig) *doorbell {
	ctx, stop := context.WithCancel(ctx)
	parts := cfg.Partitions
	b := &doorbell{rdb: rdb, ring: make(chan struct{}, 1), logger: cfg.Logger, stop: stop, manage: cfg.Events == KeyspaceEventsAuto,
		wanted: make([]atomic.Bool, len(parts)), index: make(map[string]int, len(parts)),
		watched: make(chan struct{}), backlog: BacklogChannel(parts[0].Orders, cfg.Group)}
	b.owners = newOwners(rdb, cfg, b.rang)
	db := 0
	if c, ok := rdb.(*redis.Client); ok {
		db = c.Options().DB
	}
	_, cluster := rdb.(*redis.ClusterClient)
	for i, p := range parts {
		if i == 0 || cluster {
			b.subs = append(b.subs, &bellSub{ps: rdb.Subscribe(ctx), confirmed: make(chan struct{}, 1)})
		}
		sub := b.subs[len(b.subs)-1]
		sub.channels, sub.parts = append(sub.channels, KeyspaceChannel(db, p.Orders)), append(sub.parts, p.Index)
		b.index[KeyspaceChannel(db, p.Orders)] = p.Index
	}
	go func() { <-ctx.Done(); b.closeSubs() }()
	go b.owners.watch(ctx, b.watched)
	return b
}

// BacklogChannel is the channel on which a worker of group asks the others for help with a backlog on the
// partitions whose first stream is stream.
func BacklogChannel(stream, group string) string { return stream + ":backlog:" + group }

// rang rings, as an event would: the owners changed.
func (b *doorbell) rang() {
	select {
	case b.ring <- struct{}{}:
	default:
	}
}

// askHelp publishes on the backlog channel, at most every helpEvery, unless no other consumer is live:
// this worker's read came back full.
func (b *doorbell) askHelp(ctx context.Context) {
	if b.owners.live.Load() < 2 || time.Since(b.helped) < helpEvery {
		return
	}
	b.helped = time.Now()
	if err := b.rdb.Publish(ctx, b.backlog, "backlog").Err(); err != nil && ctx.Err() == nil {
		b.logger.Debug("asking the idle workers for help failed", "err", err)
	}
}

// helpEvery bounds how often a busy worker asks for help.
const helpEvery = 100 * time.Millisecond

// arm subscribes to the events of the partitions it owns and to the backlog channel, unless it is
// subscribed, and reports whether it just did: the caller then reads once more, for the entries added
// before the subscription. Subscribed, it subscribes again when the partitions it owns changed. A
// subscription that fails leaves the doorbell unarmed (the wait then polls every idlePoll) and is tried
// again next time.
func (b *doorbell) arm(ctx context.Context) bool {
	if b.armed && b.owners.changed.Swap(false) {
		b.disarm(ctx)
	}
	if b.armed || !b.turnOn(ctx) {
		return false
	}
	b.owners.changed.Store(false)
	for i, sub := range b.subs {
		var channels []string
		for k, ch := range sub.channels {
			if b.owners.owned[sub.parts[k]].Load() {
				channels = append(channels, ch)
			}
		}
		if i == 0 {
			channels = append(channels, b.backlog)
		}
		if len(channels) == 0 {
			continue
		}
		if err := sub.subscribe(ctx, b, channels); err != nil {
			if ctx.Err() == nil {
				b.logger.Warn("subscribing to keyspace events failed: polling", "err", err)
			}
			b.unsubscribe(ctx)
			return false
		}
	}
	b.armed = true
	b.wantAll() // the entries added before the subscription
	return true
}

// want marks partition i to be read.
func (b *doorbell) want(i int) { b.wanted[i].Store(true) }

// wantAll marks every partition to be read.
func (b *doorbell) wantAll() {
	for i := range b.wanted {
		b.wanted[i].Store(true)
	}
	b.all.Store(time.Now().UnixNano())
}

// wantOwned marks the partitions this consumer owns to be read: the periodic look at a partition is its
// owners' (bellOwners of them), not every consumer's, so that idle workers cost Redis the same however many
// there are. A partition whose owners both died is looked at again once the others count them out
// (liveWithin); until it can learn of the others, a consumer owns every partition.
func (b *doorbell) wantOwned() {
	for i := range b.wanted {
		if b.owns(i) {
			b.wanted[i].Store(true)
		}
	}
	b.all.Store(time.Now().UnixNano())
}

// owns reports whether this consumer owns partition i (owners).
func (b *doorbell) owns(i int) bool { return b.owners.owned[i].Load() }

// untilAll is how long until every partition is wanted again (wantedOf), at least a millisecond: an idle
// subscriber waits no longer, whatever events of other partitions came meanwhile.
func (b *doorbell) untilAll() time.Duration {
	return max(idlePoll-time.Since(time.Unix(0, b.all.Load())), time.Millisecond)
}

// wantedOf returns the partitions of parts to be read while subscribed, every one of them idlePoll after
// the last time, and takes their marks off (a mark set again meanwhile stays: an event that comes during
// their read is read next).
func (b *doorbell) wantedOf(parts []partition, count int) []partition {
	if time.Since(time.Unix(0, b.all.Load())) >= idlePoll {
		b.wantOwned()
		b.sweeping = true
	}
	var wanted []partition
	for _, p := range parts {
		if len(wanted) < count && b.wanted[p.Index].Swap(false) {
			wanted = append(wanted, p)
		}
	}
	if len(wanted) == 0 {
		b.sweeping = false // the sweep is over: the subscriber waits
	}
	return wanted
}

// found is told how many entries a read while subscribed found. Entries that the read of every partition
// every idlePoll finds may be entries whose events never came: an operator may have turned the events off
// (CONFIG SET notify-keyspace-events ""), which nothing else would notice, and a trickle of orders would
// then wait for that read, a second on average, instead of milliseconds. So once per such read, when the
// doorbell manages the events (KeyspaceEventsAuto), it checks them (CONFIG GET, on every master) and turns them on
// again; there is no such call on a read an event asked for.
func (b *doorbell) found(ctx context.Context, entries int) {
	if entries == 0 || !b.sweeping || !b.manage || b.off {
		return
	}
	b.sweeping = false
	turnedOn, err := enableKeyspaceEvents(ctx, b.rdb)
	switch {
	case ctx.Err() != nil:
	case redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "unknown command"): // CONFIG refused now
		b.pollInstead(ctx, err)
	case err != nil: // a node out of reach or loading, say: the next sweep checks again
		b.logger.Debug("checking that Redis publishes keyspace events failed", "err", err)
	case turnedOn:
		b.logger.Warn("keyspace events had been turned off in Redis (notify-keyspace-events lacked K and t): idle consumers " +
			"found entries only by reading every partition now and then; turned them on again")
	}
}

// turnOn turns the keyspace events on when the doorbell manages them and they were not turned on since
// the last broken connection (enableKeyspaceEvents); it reports whether the subscriber can wait for them.
// When Redis refuses (no CONFIG permission), the subscriber polls from then on.
func (b *doorbell) turnOn(ctx context.Context) bool {
	if b.off || !b.manage || b.enabled.Load() {
		return !b.off
	}
	if _, err := enableKeyspaceEvents(ctx, b.rdb); err != nil {
		if ctx.Err() == nil {
			b.pollInstead(ctx, err)
		}
		return false
	}
	b.enabled.Store(true)
	return true
}

// pollInstead makes the subscriber poll from now on: the keyspace events could not be turned on.
func (b *doorbell) pollInstead(ctx context.Context, err error) {
	b.off = true
	b.disarm(ctx)
	b.logger.Warn("keyspace events could not be turned on: idle consumers poll; set notify-keyspace-events to Kt "+
		"in the Redis configuration and KEYSPACE_EVENTS=on to let them wait instead", "err", err)
}

// enableKeyspaceEvents makes Redis publish the keyspace events of streams (notify-keyspace-events gains K
// and t, keeping the flags it has), on every master of a cluster; it reports whether some master lacked
// the events.
func enableKeyspaceEvents(ctx context.Context, rdb redis.UniversalClient) (turnedOn bool, err error) {
	var lacked atomic.Bool
	enable := func(ctx context.Context, c *redis.Client) error {
		cfg, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			return err
		}
		flags := cfg["notify-keyspace-events"]
		if strings.Contains(flags, "K") && strings.ContainsAny(flags, "tA") {
			return nil
		}
		lacked.Store(true)
		return c.ConfigSet(ctx, "notify-keyspace-events", flags+"Kt").Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, enable)
	case *redis.Client:
		err = enable(ctx, c)
	default:
		err = fmt.Errorf("redisstream: keyspace events: unsupported client %T", rdb)
	}
	return lacked.Load() && err == nil, err
}

// disarm unsubscribes, when armed.
func (b *doorbell) disarm(ctx context.Context) {
	b.sweeping = false
	if b.armed {
		b.armed = false
		b.unsubscribe(ctx)
	}
}

func (b *doorbell) unsubscribe(ctx context.Context) {
	for _, sub := range b.subs {
		if len(sub.subscribed) > 0 {
			_ = sub.ps.Unsubscribe(ctx, sub.subscribed...)
			sub.subscribed = nil
		}
	}
}

// wait waits for a ring, at most d.
func (b *doorbell) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-b.ring:
	case <-t.C:
	}
}

// close ends the doorbell, and waits until the consumer is out of the live ones (or could not be taken out
// within a second).
func (b *doorbell) close() {
	b.stop()
	<-b.watched
}

func (b *doorbell) closeSubs() {
	for _, sub := range b.subs {
		_ = sub.ps.Close()
	}
}

// subscribe subscribes to channels and waits until Redis confirmed it.
func (sub *bellSub) subscribe(ctx context.Context, b *doorbell, channels []string) error {
	select { // a confirmation left from an earlier subscription, or a reconnection's
	case <-sub.confirmed:
	default:
	}
	sub.subscribed = channels
	sub.count.Store(int64(len(channels)))
	if err := sub.ps.Subscribe(ctx, channels...); err != nil {
		return err
	}
	// The receiver starts after the first subscription: on a cluster, the connection it would open
	// without one would go to any node.
	sub.receiving.Do(func() { go sub.receive(ctx, b) })
	select {
	case <-sub.confirmed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(subscribeTimeout):
		return fmt.Errorf("no confirmation of the subscription to %s within %v", strings.Join(channels, " "), subscribeTimeout)
	}
}

// receive marks the partition of every event wanted and rings; on a message of the backlog channel, and
// after a broken connection (events may have been lost; go-redis reconnects and subscribes again), it
// marks every partition; until the subscription is closed.
func (sub *bellSub) receive(ctx context.Context, b *doorbell) {
	for ctx.Err() == nil {
		m, err := sub.ps.Receive(ctx)
		if s, ok := m.(*redis.Subscription); ok && s.Kind == "subscribe" && int64(s.Count) == sub.count.Load() {
			select {
			case sub.confirmed <- struct{}{}:
			default:
			}
			continue
		}
		msg, ok := m.(*redis.Message)
		if !ok && err == nil {
			continue // an unsubscribe's confirmation, a pong
		}
		if i, known := b.index[channelOf(msg)]; known {
			b.want(i)
		} else { // the backlog channel, or a broken connection
			b.wantAll()
		}
		select {
		case b.ring <- struct{}{}:
		default:
		}
		if err != nil {
			b.enabled.Store(false) // Redis may have restarted without them
			pauseFor(ctx, minFailedPause)
		}
	}
}

// channelOf is the channel of msg; "" for none.
func channelOf(msg *redis.Message) string {
	if msg == nil {
		return ""
	}
	return msg.Channel
}
