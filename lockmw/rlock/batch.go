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
// with 32 goroutines on 2 cores (BenchmarkUncontended in bench/internal/harness: 1, 2 and 4 tried).
const maxInFlight = 2

// batcher runs the lock scripts of concurrent callers on one Redis in shared round trips, as one pipeline
// (the flat combining of the worker's stock writes; Redisson's Netty connections pipeline the same way).
// A call made while fewer than maxInFlight round trips are out goes at once, on its own, under its own
// context: a lone caller pays nothing. A queued call keeps its context too: its caller stops waiting when
// it ends while the call waits in the queue; once a batch took it, until its reply (the batch lasts until
// the latest deadline of its calls), so that no call its caller makes next can overtake it.
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

// newRunner returns the runner of the lock scripts on rdb: a batcher on one server. A cluster client runs
// each script on its own: a batch would wait for its slowest master, one slow master would hold up the
// locks of every slot.
func newRunner(rdb redis.UniversalClient) runner {
	if c, ok := rdb.(*redis.Client); ok {
		return &batcher{rdb: c}
	}
	return direct{rdb}
}

// run runs script as Script.Run does (EVALSHA, then EVAL when the server does not know it), alone or in a
// batch.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		cmd := runScript(ctx, b.rdb, script, keys, args...)
		if batch := b.take(); len(batch) > 0 {
			go b.sendAll(batch)
		}
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
	if !b.abandon(c) {
		// Taken into a batch: its caller waits for its reply (the batch's deadline bounds it), lest a call
		// made next (an undo) overtake it.
		<-c.done
		return c.cmd
	}
	cmd := redis.NewCmd(c.ctx)
	cmd.SetErr(context.Cause(c.ctx))
	return cmd
}

// abandon takes c out of the queue; false when a batch took it already.
func (b *batcher) abandon(c *call) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	return i >= 0
}

// take takes the queued calls for the round trip that just came back; with none it gives the round trip
// up.
func (b *batcher) take() []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch := b.queue
	b.queue = nil
	if len(batch) == 0 { // none queued, or their callers left
		b.inFlight--
	}
	return batch
}

// sendAll sends batch and then every batch queued meanwhile, until none is.
func (b *batcher) sendAll(batch []*call) {
	for ; len(batch) > 0; batch = b.take() {
		b.send(batch)
	}
}

// send runs batch in one pipeline; a script the server does not know (NOSCRIPT) runs again alone (its sends
// taken back: it did not run).
func (b *batcher) send(batch []*call) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	pipe := b.rdb.Pipeline()
	sent := make([]int32, len(batch))
	for i, c := range batch {
		sent[i] = sendsIn(c.args).count()
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range batch {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			sendsIn(c.args).rewind(sent[i])
			c.cmd = runScript(ctx, b.rdb, c.script, c.keys, c.args...)
		}
		close(c.done)
	}
}

// batchContext is the context of a batch: the first call's values, no caller's cancellation, and the
// latest deadline among the calls (none when one of them has none: the client's timeouts bound it).
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	deadlines := make([]time.Time, 0, len(batch))
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		deadlines = append(deadlines, d)
	}
	return context.WithDeadline(ctx, slices.MaxFunc(deadlines, time.Time.Compare))
}
