package rlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxInFlight is how many round trips a batcher keeps on the wire at once. A call made while that many
// are out waits for the first to come back and goes with every call queued meanwhile. More round trips
// in flight cost more system calls per lock operation on both ends (a batch of n scripts is one write and
// one read for the client and for Redis); fewer leave Redis idle while replies travel. 2 measured best
// with 32 goroutines on 2 cores (scripts/bench.sh --only uncontended).
const maxInFlight = 2

// batcher runs the lock scripts of concurrent callers on one Redis in shared round trips, as one pipeline
// (the flat combining of the worker's stock writes; Redisson's Netty connections pipeline the same way).
// A call made while fewer than maxInFlight round trips are out goes at once, on its own, under its own
// context: a lone caller pays nothing. A queued call keeps its context too: its caller stops waiting when
// it ends (a call already sent may still run, as after any timeout, which the callers already handle).
type batcher struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	queue    []*call
	inFlight int
}

// call is one script run waiting in a batcher's queue.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{} // closed once cmd has its reply
}

func newBatcher(rdb redis.UniversalClient) *batcher { return &batcher{rdb: rdb} }

// run runs script as Script.Run does (EVALSHA, then EVAL when the server does not know it), alone or in a
// batch.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		cmd := script.Run(ctx, b.rdb, keys, args...)
		b.next()
		return cmd
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	b.mu.Lock()
	queued := b.abandon(c)
	b.mu.Unlock()
	if !queued { // taken into a batch as ctx ended: its reply may be in
		select {
		case <-c.done:
			return c.cmd
		default:
		}
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(context.Cause(ctx))
	return cmd
}

// abandon takes c out of the queue; false when a batch took it already.
func (b *batcher) abandon(c *call) bool {
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// next hands the round trip that just came back to the queued calls, if any, or gives it up.
func (b *batcher) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inFlight--
		return
	}
	batch := b.queue
	b.queue = nil
	go b.sendAll(batch)
}

// sendAll sends batch and then every batch queued meanwhile, until the queue is empty.
func (b *batcher) sendAll(batch []*call) {
	for batch != nil {
		b.send(batch)
		b.mu.Lock()
		batch, b.queue = b.queue, nil
		if batch == nil {
			b.inFlight--
		}
		b.mu.Unlock()
	}
}

// send runs batch in one pipeline, under a context that no caller's cancellation ends and that lasts as
// long as the longest deadline among them; a script the server does not know (NOSCRIPT) runs again alone.
func (b *batcher) send(batch []*call) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range batch {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Run(ctx, b.rdb, c.keys, c.args...)
		}
		close(c.done)
	}
}

// batchContext is the context of a batch: without cancellation, with the latest deadline of its calls, or
// none when one of them has none.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
