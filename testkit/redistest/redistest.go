// Package redistest starts real redis-server processes for tests: one, several independent ones for
// Redlock, or a Redis Cluster (StartCluster), each on a free loopback port in its own temp dir, with fault
// injection (kill, pause, restart; a cluster's master killed for its replica to take over).
//
// Every server is stopped through t.Cleanup, also when the test fails or panics. If the test binary itself
// dies, the kernel kills its servers (PR_SET_PDEATHSIG), so no server outlives the binary. Each process
// carries the title marker ProcessMarker, which scripts/test.sh uses to prove nothing leaked.
package redistest

import (
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/netns"
	"github.com/stockflow/stockflow/internal/redisproc"
)

// ProcessMarker appears in the process title of every server this package starts.
const ProcessMarker = redisproc.ProcessMarker

// Option configures a server.
type Option func(*redisproc.Options)

// WithPersistence turns on append-only persistence with fsync on every write, so data written before a
// Kill or Restart is there again after the restart.
func WithPersistence() Option { return func(o *redisproc.Options) { o.Persist = true } }

// OnHost runs the server in host's network namespace (see NewHost), at host.IP:6379.
func OnHost(host *netns.Host) Option { return func(o *redisproc.Options) { o.Host = host } }

// NewHost builds a network namespace for partition tests (netns.Host), removed when the test ends (after
// the servers started on it, which are stopped first). It skips the test where namespaces cannot be
// built (not root, no ip command), saying why.
func NewHost(t testing.TB) *netns.Host {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("partition test skipped: %v", err)
	}
	h, err := netns.New()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return h
}

// Server is one redis-server process of a test.
type Server struct {
	*redisproc.Server
	t testing.TB
}

// Start starts one server and registers its cleanup with t.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := redisproc.Options{Dir: t.TempDir()}
	for _, opt := range opts {
		opt(&o)
	}
	p, err := redisproc.Start(o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Server{Server: p, t: t}
}

// StartN starts n independent servers (no replication between them).
func StartN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, opts...)
	}
	return servers
}

// Client returns a new go-redis client for the server (over TLS and logged in when the server is set up
// so), closed when the test ends. It honours context deadlines (ContextTimeoutEnabled): without that,
// go-redis waits out its own timeouts on a paused server.
func (s *Server) Client() *redis.Client {
	opts, err := s.ClientOptions()
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(opts)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the process with SIGSTOP: it keeps its port but answers nothing until Resume.
func (s *Server) Pause() { s.check(s.Server.Pause()) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.check(s.Server.Resume()) }

// Restart kills the process if it runs and starts it again on the same port and data dir. Data survives
// only WithPersistence.
func (s *Server) Restart() { s.check(s.Server.Restart()) }

func (s *Server) check(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// ReportCPUPer measures the CPU time the server behind rdb spends (INFO cpu, user and system) while run
// runs, and reports it on b per unit of work, as "redis-µs/<unit>": how benchmarks compare what Redis
// spends on two ways of doing the same work, in the same run.
func ReportCPUPer(b *testing.B, rdb *redis.Client, units int, unit string, run func()) {
	b.Helper()
	before, err := redisproc.ServerCPU(b.Context(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	run()
	after, err := redisproc.ServerCPU(b.Context(), rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((after-before).Microseconds())/float64(units), "redis-µs/"+unit)
}

// ClosedAddr is a loopback address nothing listens on (a port taken and freed again): a Redis that does not
// answer.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
