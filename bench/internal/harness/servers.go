package harness

import (
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redisproc"
)

// startServers starts n independent redis-servers (no persistence, no replication) on free loopback
// ports; they die with the harness. onStart is told each pid and its address, which its process title
// holds (the bench script kills what is left).
func startServers(n int, onStart func(pid int, cmdline string)) ([]*redisproc.Server, error) {
	var servers []*redisproc.Server
	for range n {
		s, err := redisproc.Start(redisproc.Options{})
		if err != nil {
			stopServers(servers)
			return nil, err
		}
		if onStart != nil {
			onStart(s.Pid(), s.Addr+" "+redisproc.ProcessMarker)
		}
		servers = append(servers, s)
	}
	return servers, nil
}

func stopServers(servers []*redisproc.Server) {
	for _, s := range servers {
		s.Stop()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newClient is the client every contender gets: go-redis defaults, context deadlines honoured (as
// lockmw asks of its clients).
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}
