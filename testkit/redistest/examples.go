package redistest

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// Examples runs redis-servers for Example functions, which take no *testing.T: servers start on first
// use, and the package's TestMain stops them after m.Run.
type Examples struct {
	mu      sync.Mutex
	servers []*redisproc.Server
}

// Addrs returns the addresses of n servers, each emptied (FLUSHALL) so that an example's output (fencing
// tokens start at 1) does not depend on the examples that ran before it, nor on -count. It panics when a
// server cannot start or be emptied: an example has no other way to fail.
func (e *Examples) Addrs(n int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.servers) < n {
		s, err := redisproc.Start(redisproc.Options{})
		if err != nil {
			panic(err)
		}
		e.servers = append(e.servers, s)
	}
	addrs := make([]string, n)
	for i, s := range e.servers[:n] {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		err := c.FlushAll(context.Background()).Err()
		_ = c.Close()
		if err != nil {
			panic(err)
		}
		addrs[i] = s.Addr
	}
	return addrs
}

// Stop stops the servers.
func (e *Examples) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		s.Stop()
	}
	e.servers = nil
}
