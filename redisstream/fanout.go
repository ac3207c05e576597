package redisstream

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// subscription is one Subscribe without a consumer group (fan-out): a reader per stream (XREAD), all handing
// messages out on out, each message then awaited until its Ack or Nack. (A group's subscriptions are
// read by a reader: reader.go.)
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

func (sub *subscription) start(p partition) { sub.loop(func() { sub.read(p) }) }

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

// read hands out the entries of partition p's stream from FanOutOldestId on.
func (sub *subscription) read(p partition) {
	stream := p.Orders
	from := sub.fanOutStart(stream)
	var pause backoff
	for sub.ctx.Err() == nil {
		n := sub.reserve(sub.cfg.ReadBatchSize)
		if n == 0 {
			return
		}
		res, err := sub.rdb.XRead(sub.ctx, &redis.XReadArgs{Streams: []string{stream, from}, Count: n,
			Block: sub.cfg.BlockTime}).Result()
		var entries []redis.XMessage
		if len(res) > 0 {
			entries = res[0].Messages
		}
		sub.free(n - int64(len(entries)))
		if err != nil && !errors.Is(err, redis.Nil) {
			if sub.ctx.Err() != nil {
				continue
			}
			if stop := sub.cfg.ShouldStopOnReadErrors; stop != nil && stop(err) {
				sub.s.logger.Error("Read failed: the subscription ends", err, sub.log.Add(watermill.LogFields{"stream": stream}))
				sub.cancel()
				return
			}
			sub.s.logger.Error("Read failed", err, sub.log.Add(watermill.LogFields{"stream": stream}))
			pause.wait(sub.ctx)
			continue
		}
		pause.reset()
		sub.handOut(p, entries)
		if len(entries) > 0 {
			from = entries[len(entries)-1].ID
		}
	}
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

// handOut hands out entries of partition p whose slots are taken.
func (sub *subscription) handOut(p partition, entries []redis.XMessage) {
	for i, e := range entries {
		entry := Entry{ID: e.ID, Stream: p.Orders, Partition: p.Index, Partitioned: p.Partitioned, Values: e.Values}
		msg := entry.MessageWith(sub.cfg.Unmarshaller)
		if !sub.send(msg) {
			sub.free(int64(len(entries) - i))
			return
		}
	}
}

// send hands msg out and awaits its Ack or Nack in a goroutine of its own; false once the subscription ends.
func (sub *subscription) send(msg *message.Message) bool {
	ctx, cancel := messageContext(sub.ctx)
	msg.SetContext(ctx)
	select {
	case sub.out <- msg:
	case <-sub.ctx.Done():
		cancel()
		return false
	}
	sub.waiters.Add(1)
	go sub.await(msg, cancel)
	return true
}

// await follows one message out until its Ack, its Nack (it is handed out again) or the subscription's end.
func (sub *subscription) await(msg *message.Message, cancel context.CancelFunc) {
	defer sub.waiters.Done()
	for {
		select {
		case <-msg.Acked():
			cancel()
			sub.free(1)
			return
		case <-msg.Nacked():
			cancel()
			if notPending(msg) { // its answer was refused (ErrNotPending): not handed out again
				sub.free(1)
				return
			}
			if msg, cancel = sub.resend(msg); msg == nil {
				sub.free(1)
				return
			}
		case <-sub.ctx.Done():
			cancel()
			sub.free(1)
			return
		}
	}
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
	ctx, cancel := messageContext(sub.ctx)
	again.SetContext(ctx)
	select {
	case sub.out <- again:
		return again, cancel
	case <-sub.ctx.Done():
		cancel()
		return nil, nil
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
