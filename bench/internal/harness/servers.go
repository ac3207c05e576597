package harness

import (
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// startServers starts n independent redis-servers (no persistence, no replication) on free loopback
// ports; they die with the harness. OnPid is told each pid and its address, which its process title
// holds (the bench script kills what is left).
func startServers(n int, cfg Config) ([]*redisproc.Server, error) {
	var servers []*redisproc.Server
	for range n {
		s, err := redisproc.Start(redisproc.Options{})
		if err != nil {
			stopServers(servers)
			return nil, err
		}
		cfg.notePid(s.Pid(), s.Addr+" "+redisproc.ProcessMarker)
		servers = append(servers, s)
	}
	return servers, nil
}

func stopServers(servers []*redisproc.Server) {
	for _, s := range servers {
		s.Stop()
	}
}

func addrsOf(servers []*redisproc.Server) []string {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// notePid tells OnPid, if set, of a child process.
func (c Config) notePid(pid int, cmdline string) {
	if c.OnPid != nil {
		c.OnPid(pid, cmdline)
	}
}

// newClient is the client every contender gets: go-redis defaults, context deadlines honoured (as
// rlock asks of its clients).
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// newClients is a client for every address.
func newClients(addrs []string) []*redis.Client {
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = newClient(a)
	}
	return clients
}

func closeAll(clients []*redis.Client) {
	for _, c := range clients {
		_ = c.Close()
	}
}
