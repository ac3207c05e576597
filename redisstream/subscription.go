package redisstream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// subscription is one Subscribe: a reader per stream (and, in a group, a claimer and a consumer check per
// stream), all handing messages out on out, each message then awaited until its Ack or Nack.
type subscription struct {
	s      *Subscriber
	cfg    *SubscriberConfig
	rdb    redis.UniversalClient
	log    watermill.LogFields
	ctx    context.Context
	cancel context.CancelFunc
	out    chan *message.Message

	// slots holds a token for every message out and not yet acked (MaxInFlight).
	slots   chan struct{}
	loops   sync.WaitGroup // readers, claimers, checks
	waiters sync.WaitGroup // the messages out
}

func newSubscription(ctx context.Context, s *Subscriber, topic string) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	sub := &subscription{s: s, cfg: &s.config, rdb: s.config.Client, ctx: ctx, cancel: cancel,
		out: make(chan *message.Message), slots: make(chan struct{}, s.config.MaxInFlight),
		log: watermill.LogFields{"topic": topic, "consumer_group": s.config.ConsumerGroup, "consumer": s.config.Consumer}}
	go func() {
		select {
		case <-s.closing:
		case <-ctx.Done():
		}
		cancel()
	}()
	return sub
}

func (sub *subscription) start(stream string, ownPending bool) {
	sub.loop(func() { sub.read(stream, ownPending) })
	if sub.cfg.ConsumerGroup != "" {
		sub.loop(func() { sub.every(sub.cfg.ClaimInterval, func() { sub.claim(stream) }) })
		sub.loop(func() { sub.every(sub.cfg.CheckConsumersInterval, func() { sub.checkConsumers(stream) }) })
	}
}

func (sub *subscription) loop(f func()) {
	sub.loops.Add(1)
	go func() {
		defer sub.loops.Done()
		f()
	}()
}

// wait returns once the subscription ended and its channel is closed.
func (sub *subscription) wait() {
	sub.loops.Wait()
	sub.waiters.Wait()
	close(sub.out)
}

func (sub *subscription) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// reserve waits for at least one free slot and takes up to n; 0 once the subscription ends.
func (sub *subscription) reserve(n int64) int64 {
	select {
	case sub.slots <- struct{}{}:
	case <-sub.ctx.Done():
		return 0
	}
	return 1 + sub.tryReserve(n-1)
}

// tryReserve takes up to n free slots without waiting.
func (sub *subscription) tryReserve(n int64) int64 {
	var got int64
	for got < n {
		select {
		case sub.slots <- struct{}{}:
			got++
		default:
			return got
		}
	}
	return got
}

func (sub *subscription) free(n int64) {
	for range n {
		<-sub.slots
	}
}

// read hands out the stream's new entries (">"), after, when ownPending, those this consumer left pending
// ("0"). Fan-out reads the stream itself from FanOutOldestId.
func (sub *subscription) read(stream string, ownPending bool) {
	from := ">"
	if ownPending {
		from = "0"
	}
	if sub.cfg.ConsumerGroup == "" {
		from = sub.fanOutStart(stream)
	}
	var pause backoff
	for sub.ctx.Err() == nil {
		n := sub.reserve(sub.cfg.ReadBatchSize)
		if n == 0 {
			return
		}
		entries, err := sub.readOnce(stream, from, n)
		sub.free(n - int64(len(entries)))
		if err != nil {
			sub.readFailed(stream, err, &pause)
			continue
		}
		pause.reset()
		sub.handOut(stream, from, entries)
		switch {
		case len(entries) > 0 && from != ">":
			from = entries[len(entries)-1].ID // the next page of our pending entries, or of the fan-out
		case len(entries) == 0 && from != ">" && sub.cfg.ConsumerGroup != "":
			from = ">" // nothing of ours left pending
		}
	}
}

func (sub *subscription) readOnce(stream, from string, n int64) ([]redis.XMessage, error) {
	var res []redis.XStream
	var err error
	if sub.cfg.ConsumerGroup == "" {
		res, err = sub.rdb.XRead(sub.ctx, &redis.XReadArgs{Streams: []string{stream, from}, Count: n,
			Block: sub.cfg.BlockTime}).Result()
	} else {
		block := sub.cfg.BlockTime
		if from != ">" {
			block = -1 // a consumer's pending entries are there or not: no waiting
		}
		res, err = sub.rdb.XReadGroup(sub.ctx, &redis.XReadGroupArgs{Group: sub.cfg.ConsumerGroup,
			Consumer: sub.cfg.Consumer, Streams: []string{stream, from}, Count: n, Block: block}).Result()
	}
	if errors.Is(err, redis.Nil) || len(res) == 0 {
		return nil, nil
	}
	return res[0].Messages, err
}

// readFailed logs a failed read and pauses before the next; a group deleted (or its stream) is created
// again at OldestId.
func (sub *subscription) readFailed(stream string, err error, pause *backoff) {
	if sub.ctx.Err() != nil {
		return
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		sub.s.logger.Info("Consumer group missing, creating it again", sub.log.Add(watermill.LogFields{"stream": stream}))
		if err = sub.s.createGroup(sub.ctx, stream); err == nil {
			return
		}
	}
	sub.s.logger.Error("Read failed", err, sub.log.Add(watermill.LogFields{"stream": stream}))
	pause.wait(sub.ctx)
}

// fanOutStart resolves "$" to the stream's last id now, so that no entry added between two reads is missed.
func (sub *subscription) fanOutStart(stream string) string {
	if sub.cfg.FanOutOldestId != "$" {
		return sub.cfg.FanOutOldestId
	}
	last, err := sub.rdb.XRevRangeN(sub.ctx, stream, "+", "-", 1).Result()
	if err != nil || len(last) == 0 {
		return "0-0"
	}
	return last[0].ID
}

// handOut hands out entries whose slots are taken. Entries read from the group's new ones (">") were
// delivered once; others (a consumer's own pending ones, claims) carry their count from XPENDING.
func (sub *subscription) handOut(stream, from string, entries []redis.XMessage) {
	var counts map[string]int64
	if from != ">" && sub.cfg.ConsumerGroup != "" {
		counts = sub.deliveries(stream, entries)
	}
	for i, e := range entries {
		if e.Values == nil { // deleted while pending: nothing to hand out
			if sub.cfg.ConsumerGroup != "" {
				sub.s.acks.add(stream, e.ID)
			}
			sub.free(1)
			continue
		}
		deliveries := int64(1)
		if counts != nil {
			deliveries = counts[e.ID]
		}
		msg := entryMessage(sub.cfg.Unmarshaller, stream, e.ID, e.Values, deliveries)
		if !sub.send(msg, stream, e.ID) {
			sub.free(int64(len(entries) - i))
			return
		}
	}
}

// deliveries returns the delivery count of each of entries (pending to this consumer).
func (sub *subscription) deliveries(stream string, entries []redis.XMessage) map[string]int64 {
	if len(entries) == 0 {
		return nil
	}
	pending, err := sub.rdb.XPendingExt(sub.ctx, &redis.XPendingExtArgs{Stream: stream, Group: sub.cfg.ConsumerGroup,
		Start: entries[0].ID, End: entries[len(entries)-1].ID, Count: int64(len(entries)), Consumer: sub.cfg.Consumer}).Result()
	counts := make(map[string]int64, len(pending))
	if err != nil {
		sub.s.logger.Error("Delivery counts unknown", err, sub.log.Add(watermill.LogFields{"stream": stream}))
	}
	for _, p := range pending {
		counts[p.ID] = p.RetryCount
	}
	return counts
}

// send hands msg out and awaits its Ack or Nack in a goroutine of its own; false once the subscription ends.
func (sub *subscription) send(msg *message.Message, stream, id string) bool {
	ctx, cancel := context.WithCancel(sub.ctx)
	msg.SetContext(ctx)
	select {
	case sub.out <- msg:
	case <-sub.ctx.Done():
		cancel()
		return false
	}
	sub.waiters.Add(1)
	go sub.await(msg, cancel, stream, id)
	return true
}

// await follows one message out until its Ack (the entry is acked in Redis), its Nack (it is handed out
// again) or the subscription's end (it stays pending).
func (sub *subscription) await(msg *message.Message, cancel context.CancelFunc, stream, id string) {
	defer sub.waiters.Done()
	for {
		select {
		case <-msg.Acked():
			sub.acked(cancel, stream, id)
			return
		case <-msg.Nacked():
			cancel()
			if msg, cancel = sub.resend(msg); msg == nil {
				sub.free(1)
				return
			}
		case <-sub.ctx.Done():
			select {
			case <-msg.Acked(): // acked as the subscription ended: the ack still counts
				sub.acked(cancel, stream, id)
			default:
				cancel()
				sub.free(1)
			}
			return
		}
	}
}

func (sub *subscription) acked(cancel context.CancelFunc, stream, id string) {
	cancel()
	if sub.cfg.ConsumerGroup != "" {
		sub.s.acks.add(stream, id)
	}
	sub.free(1)
}

// resend hands a copy of a nacked message out after NackResendSleep; nil once the subscription ends.
func (sub *subscription) resend(msg *message.Message) (*message.Message, context.CancelFunc) {
	if d := sub.cfg.NackResendSleep; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-sub.ctx.Done():
			return nil, nil
		}
	}
	again := msg.Copy()
	ctx, cancel := context.WithCancel(sub.ctx)
	again.SetContext(ctx)
	select {
	case sub.out <- again:
		return again, cancel
	case <-sub.ctx.Done():
		cancel()
		return nil, nil
	}
}

// claim takes the stream's entries pending longer than MaxIdleTime (their consumer died) and hands them out,
// as many as there are free slots.
func (sub *subscription) claim(stream string) {
	start := "0-0"
	for sub.ctx.Err() == nil {
		n := sub.tryReserve(sub.cfg.ClaimBatchSize)
		if n == 0 {
			return
		}
		entries, next, err := sub.rdb.XAutoClaim(sub.ctx, &redis.XAutoClaimArgs{Stream: stream,
			Group: sub.cfg.ConsumerGroup, Consumer: sub.cfg.Consumer, MinIdle: sub.cfg.MaxIdleTime,
			Start: start, Count: n}).Result()
		sub.free(n - int64(len(entries)))
		if err != nil {
			if sub.ctx.Err() == nil {
				sub.s.logger.Error("Claim failed", err, sub.log.Add(watermill.LogFields{"stream": stream}))
			}
			return
		}
		if len(entries) > 0 {
			sub.s.logger.Info("Claimed idle entries", sub.log.Add(watermill.LogFields{"stream": stream, "count": len(entries)}))
		}
		sub.handOut(stream, "claim", entries)
		if next == "0-0" || next == "" {
			return
		}
		start = next
	}
}

// checkConsumers deletes the group's consumers idle past ConsumerTimeout that have nothing pending.
func (sub *subscription) checkConsumers(stream string) {
	consumers, err := sub.rdb.XInfoConsumers(sub.ctx, stream, sub.cfg.ConsumerGroup).Result()
	if err != nil {
		return
	}
	for _, c := range consumers {
		if c.Pending == 0 && c.Idle >= sub.cfg.ConsumerTimeout && c.Name != sub.cfg.Consumer {
			_ = sub.rdb.XGroupDelConsumer(sub.ctx, stream, sub.cfg.ConsumerGroup, c.Name).Err()
		}
	}
}

// backoff is the pause after a failed read: 50 ms, doubling up to 2 s.
type backoff struct{ d time.Duration }

func (b *backoff) reset() { b.d = 0 }

func (b *backoff) wait(ctx context.Context) {
	b.d = min(max(2*b.d, 50*time.Millisecond), 2*time.Second)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
