package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrReplicaAcks is the error of a message written while fewer replicas than PublisherConfig.ReplicaAcks
// acknowledged it within ReplicaAckTimeout: the master has it, its replicas may not (yet).
var ErrReplicaAcks = errors.New("redisstream: too few replicas acknowledged the write")

// DefaultReplicaAckTimeout is PublisherConfig.ReplicaAckTimeout's default: 1 s.
const DefaultReplicaAckTimeout = time.Second

// replicaAckMargin is how much a server's ReadTimeout must exceed the WAIT timeout: go-redis reads WAIT's
// reply of a pipeline under the client's ReadTimeout, and resends a pipeline whose read timed out.
const replicaAckMargin = 500 * time.Millisecond

// writes is where a Publish queues its commands: one pipeline of the client, or with ReplicaAcks one per
// server that the commands' keys live on, each ended by a WAIT. WAIT counts the writes of its own
// connection, so it must follow them in their pipeline, on their server (a cluster's pipeline would send a
// WAIT, which names no key, to any master).
type writes struct {
	p       *Publisher
	ctx     context.Context
	one     redis.Pipeliner                   // without ReplicaAcks
	servers map[*redis.Client]redis.Pipeliner // with ReplicaAcks
	waits   map[*redis.Client]*redis.Cmd
	of      map[string]*redis.Client // the server of each key queued
	err     error                    // a server that could not be found
}

func (p *Publisher) newWrites(ctx context.Context) *writes {
	w := &writes{p: p, ctx: ctx}
	if p.config.ReplicaAcks == 0 {
		w.one = p.config.Client.Pipeline()
	} else {
		w.servers, w.waits, w.of = map[*redis.Client]redis.Pipeliner{}, map[*redis.Client]*redis.Cmd{}, map[string]*redis.Client{}
	}
	return w
}

// to is the pipeline of a write to key (every key of a script call is in its slot).
func (w *writes) to(key string) redis.Pipeliner {
	if w.one != nil {
		return w.one
	}
	server, ok := w.of[key]
	if !ok {
		var err error
		if server, err = serverOf(w.ctx, w.p.config.Client, key); err != nil {
			w.err = err // server nil: the client's own pipeline takes the writes; acked fails them whatever its WAIT says
		}
		w.of[key] = server
	}
	pipe, ok := w.servers[server]
	if !ok {
		pipe = w.p.config.Client.Pipeline()
		if server != nil {
			pipe = server.Pipeline()
		}
		w.servers[server] = pipe
	}
	return pipe
}

// exec sends the pipelines, each server's with its WAIT, those of several servers at once. Each command
// carries its own error.
func (w *writes) exec() {
	if w.one != nil {
		_, _ = w.one.Exec(w.ctx)
		return
	}
	timeout := cmp.Or(w.p.config.ReplicaAckTimeout, DefaultReplicaAckTimeout)
	var (
		wg    sync.WaitGroup
		moved atomic.Bool // a server answered MOVED (its slot has a new owner) or could not be reached
	)
	for server, pipe := range w.servers {
		w.waits[server] = pipe.Do(w.ctx, "wait", w.p.config.ReplicaAcks, max(timeout.Milliseconds(), 1))
		wg.Go(func() {
			cmds, _ := pipe.Exec(w.ctx)
			if slices.ContainsFunc(cmds, staleServer) {
				moved.Store(true)
			}
		})
	}
	wg.Wait()
	if c, ok := w.p.config.Client.(*redis.ClusterClient); ok && moved.Load() {
		c.ReloadState(w.ctx) // a server's client follows no redirect: the next Publish asks the new owner
	}
}

// staleServer reports whether cmd's server may no longer own its keys: it answered MOVED, or could not be
// reached (a master that died: its replica may be promoted). A slot being migrated (ASK) is not followed
// either: its writes fail until the migration ends.
func staleServer(cmd redis.Cmder) bool {
	err := cmd.Err()
	var reply redis.Error
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || !errors.As(err, &reply))
}

// acked is nil when the writes to key are acknowledged as ReplicaAcks asks (or it asks for none), else why not.
func (w *writes) acked(key string) error {
	if w.one != nil {
		return nil
	}
	server, ok := w.of[key]
	if !ok {
		return nil // nothing was written to key
	}
	if server == nil {
		return w.err // its server could not be found: no WAIT on its connection says anything of its writes
	}
	n, err := w.waits[server].Int64()
	if err != nil {
		return fmt.Errorf("redisstream: WAIT for %d replicas after writing %s: %w", w.p.config.ReplicaAcks, key, err)
	}
	if n < int64(w.p.config.ReplicaAcks) {
		return fmt.Errorf("%w: %d of %d replicas have %s's write", ErrReplicaAcks, n, w.p.config.ReplicaAcks, key)
	}
	return nil
}

// serverOf is the client of the server that holds key: the client itself, or the master of key's slot or
// shard.
func serverOf(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	var (
		server *redis.Client
		err    error
	)
	switch c := rdb.(type) {
	case *redis.Client:
		server = c
	case *redis.ClusterClient:
		server, err = c.MasterForKey(ctx, key)
	case *redis.Ring:
		server, err = c.GetShardClientForKey(key)
	default:
		return nil, fmt.Errorf("redisstream: PublisherConfig.ReplicaAcks needs a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstream: find the server of %s: %w", key, err)
	}
	return server, nil
}

// checkReplicaAcks reports a ReplicaAcks setting that cannot work with c's client: one of another type, or
// whose ReadTimeout leaves the WAIT no room.
func (c PublisherConfig) checkReplicaAcks() error {
	if c.ReplicaAcks == 0 {
		return nil
	}
	var rt time.Duration
	switch cl := c.Client.(type) {
	case *redis.Client:
		rt = cl.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = cl.Options().ReadTimeout
	case *redis.Ring:
		rt = shardReadTimeout(cl.Options().ReadTimeout)
	default:
		return fmt.Errorf("redisstream: PublisherConfig.ReplicaAcks needs a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", c.Client)
	}
	if timeout := cmp.Or(c.ReplicaAckTimeout, DefaultReplicaAckTimeout); rt > 0 && timeout+replicaAckMargin > rt {
		return fmt.Errorf("redisstream: PublisherConfig.ReplicaAckTimeout %v needs a client ReadTimeout of at least %v, not %v", timeout, timeout+replicaAckMargin, rt)
	}
	return nil
}

// shardReadTimeout is the ReadTimeout that a Ring's shard clients get from the Ring's own, which go-redis
// keeps as given: a client's options turn 0 into go-redis's default (5 s), -1 and -2 into none.
func shardReadTimeout(rt time.Duration) time.Duration {
	switch rt {
	case 0:
		return 5 * time.Second
	case -1, -2:
		return 0
	}
	return rt
}
