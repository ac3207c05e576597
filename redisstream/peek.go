package redisstream

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// peekTimeout bounds a look of the peeker.
const peekTimeout = time.Second

// A peeker looks, for every idle group subscription of a Subscriber that polls, whether its streams have
// entries the group has not handed out yet: every maxReadPause, one pipeline of XINFO GROUPS, a command a
// stream that carries no entry (so no payload, however large), for all of them. Without it each idle
// subscription calls fetch.lua on each of its streams every maxReadPause, a round trip of its own: 16 idle
// topics cost Redis 160 script calls and round trips a second, about 1 % of a core. A subscription waits
// with it once its pause has grown to maxReadPause (it reads on its own before that, so the first entries
// after a quiet spell come as fast as before), until a look finds something to read or its claim round is
// due; a claim round reads after it, so an entry a look missed waits at most ClaimInterval.
//
// A look waits for every node it asks: on a Redis Cluster with a node that does not answer, the idle
// subscriptions of the other nodes wake late too, by the client's timeouts, until the subscriptions of
// that node's streams have failed a read and skip them (peekable), a look or two.
// A stream is worth reading when its group's lag (Redis 7.0 and later) is above 0 or unknown (null: the
// stream has tombstones ahead of the group; missing: an older Redis), when the group or the stream is
// missing (the read creates the group again), or when the look failed (the read fails on its own and skips
// the partition for a while).
type peeker struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	waiting map[*peekWait]struct{}
	running bool // the loop runs: it ends once nobody waits
}

// peekWait is a subscription waiting for entries on streams of group.
type peekWait struct {
	group   string
	streams []string
	found   chan struct{} // closed by the look that found something (and took the wait out)
}

func newPeeker(rdb redis.UniversalClient) *peeker {
	return &peeker{rdb: rdb, waiting: map[*peekWait]struct{}{}}
}

// wait returns when a look finds something to read on streams of group, after d, or when ctx ends.
func (p *peeker) wait(ctx context.Context, group string, streams []string, d time.Duration) {
	w := &peekWait{group: group, streams: streams, found: make(chan struct{})}
	p.mu.Lock()
	p.waiting[w] = struct{}{}
	if !p.running {
		p.running = true
		go p.loop()
	}
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.found:
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	delete(p.waiting, w)
	p.mu.Unlock()
}

// loop looks every maxReadPause while some subscription waits.
func (p *peeker) loop() {
	tick := time.NewTicker(maxReadPause)
	defer tick.Stop()
	for range tick.C {
		p.mu.Lock()
		if len(p.waiting) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		waits := make([]*peekWait, 0, len(p.waiting))
		for w := range p.waiting {
			waits = append(waits, w)
		}
		p.mu.Unlock()
		p.look(waits)
	}
}

// look sends one XINFO GROUPS a stream waited on, in one pipeline, and ends the waits with something to read.
func (p *peeker) look(waits []*peekWait) {
	ctx, cancel := context.WithTimeout(context.Background(), peekTimeout)
	defer cancel()
	pipe := p.rdb.Pipeline()
	groups := map[string]*redis.Cmd{}
	for _, w := range waits {
		for _, s := range w.streams {
			if groups[s] == nil {
				groups[s] = pipe.Do(ctx, "XINFO", "GROUPS", s)
			}
		}
	}
	_, _ = pipe.Exec(ctx) // each stream's error is its own
	for _, w := range waits {
		for _, s := range w.streams {
			if unread(groups[s], w.group) {
				p.mu.Lock()
				delete(p.waiting, w)
				p.mu.Unlock()
				close(w.found)
				break
			}
		}
	}
}

// unread reports whether an XINFO GROUPS reply may show entries that group has not handed out: see peeker.
func unread(c *redis.Cmd, group string) bool {
	groups, err := c.Slice()
	if err != nil {
		return true
	}
	for _, g := range groups {
		fields := fieldsOf(g)
		if name, _ := fields["name"].(string); name != group {
			continue
		}
		lag, known := fields["lag"].(int64)
		return !known || lag != 0
	}
	return true
}

// fieldsOf reads a group's description: a map (RESP3) or a list of names and values (RESP2).
func fieldsOf(g any) map[any]any {
	switch g := g.(type) {
	case map[any]any:
		return g
	case []any:
		m := make(map[any]any, len(g)/2)
		for i := 0; i+1 < len(g); i += 2 {
			m[g[i]] = g[i+1]
		}
		return m
	}
	return nil
}
