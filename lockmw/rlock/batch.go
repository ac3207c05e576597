package rlock

import (
	"context"
	"slices"
	"sync"

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
// it ends (a call already sent may still run, as after any timeout, which the callers already handle). A
// batch goes under the first call's context without its cancellation or deadline: the client's read and
// write timeouts bound it.
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
	return b.wait(c)
}

// wait returns the reply of queued call c, or its context's error once that ends first.
func (b *batcher) wait(c *call) *redis.Cmd {
	select {
	case <-c.done:
		return c.cmd
	case <-c.ctx.Done():
	}
	b.abandon(c) // or, taken into a batch meanwhile, its outcome is unknown, as after any timeout
	cmd := redis.NewCmd(c.ctx)
	cmd.SetErr(context.Cause(c.ctx))
	return cmd
}

// abandon takes c out of the queue, unless a batch took it already.
func (b *batcher) abandon(c *call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = slices.DeleteFunc(b.queue, func(q *call) bool { return q == c })
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

// send runs batch in one pipeline, under a context that no caller's cancellation ends (each caller stops
// waiting at its own context's end; the client's timeouts bound the round trip); a script the server does
// not know (NOSCRIPT) runs again alone.
func (b *batcher) send(batch []*call) {
	ctx := context.WithoutCancel(batch[0].ctx)
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
