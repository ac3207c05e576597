// Package redistest starts real redis-server processes for rlock's tests and examples: one, several
// independent ones for Redlock, or a Redis Cluster (StartCluster), each on a free loopback port in a
// directory of its own, with the faults the tests inject (kill, pause, restart, failover, lost replies).
//
// It is the rlock module's own small copy of the product's testkit/redistest: importing that one
// would make the lock library's module require the whole product. Every server is stopped through
// t.Cleanup, also when the test fails or panics, and dies with the test binary (PR_SET_PDEATHSIG on
// Linux). Its process title carries ProcessMarker, as the product's servers do, so that the product's
// scripts/test.sh also proves that rlock's tests left no server running.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProcessMarker appears in the process title of every server this package starts (the product's
// internal/redisproc.ProcessMarker, which scripts/test.sh looks for).
const ProcessMarker = "stockflow-redistest"

const (
	startTimeout = 10 * time.Second
	// startAttempts: a free port can be taken by someone else before redis binds it; start tries new ones.
	startAttempts = 5
)

// errNotInstalled says how to get redis-server when it is missing.
var errNotInstalled = errors.New("redis-server not found in PATH: install it with `sudo apt-get install -y redis-server` " +
	"(Debian/Ubuntu) or `brew install redis` (macOS)")

type options struct {
	persist bool
	cluster bool // a Redis Cluster node, its cluster bus on a port of its own
}

// Option configures a server.
type Option func(*options)

// WithPersistence turns on append-only persistence with fsync on every write, so data written before a
// Kill or Restart is there again after the restart.
func WithPersistence() Option { return func(o *options) { o.persist = true } }

// Server is one redis-server process.
type Server struct {
	// Addr is host:port, stable across restarts.
	Addr string

	t       testing.TB // nil for the servers of Examples
	bin     string
	dir     string
	opts    options
	busPort string

	mu   sync.Mutex
	proc *process // nil when not running
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
}

// Start starts one server and registers its cleanup with t.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s, err := start(t.TempDir(), o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.t = t
	t.Cleanup(s.Kill) // before t.TempDir's removal: cleanups run last registered first
	return s
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

// start starts a server in dir on a free loopback port and waits until it answers.
func start(dir string, o options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNotInstalled
	}
	s := &Server{bin: bin, dir: dir, opts: o}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range startAttempts {
		if s.Addr, s.busPort, err = freePorts(o.cluster); err == nil {
			if err = s.launchLocked(); err == nil {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("start redis-server: %w", err)
}

// Client returns a new go-redis client for the server, closed when the test ends. It honours context
// deadlines (ContextTimeoutEnabled): without that, go-redis waits out its own timeouts on a paused server.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DisableIdentity: true})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL and waits until the process is gone. Connections are refused afterwards.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Pause stops the process with SIGSTOP: it keeps its port but answers nothing until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Restart kills the process if it runs and starts it again on the same port and data dir. Data survives
// only WithPersistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	// The old socket may linger for a moment; redis sets SO_REUSEADDR, so a few retries suffice.
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(50 * time.Millisecond) {
		err := s.launchLocked()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart: %v", err)
		}
	}
}

// running reports whether the process runs (it may be paused).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

func (s *Server) signal(sig os.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("redistest: redis-server on %s is not running", s.Addr)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal redis-server on %s: %v", s.Addr, err)
	}
}

func (s *Server) killLocked() {
	if s.proc != nil {
		_ = s.proc.cmd.Process.Kill()
		<-s.proc.done
		s.proc = nil
	}
}

// launchLocked starts the process, its output in redis.log, and waits until it answers PING.
func (s *Server) launchLocked() error {
	logf, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn(cmd); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.proc = p
	if err := s.waitReady(p); err != nil {
		s.killLocked()
		return fmt.Errorf("redis-server on %s: %w; log tail:\n%s", s.Addr, err, strings.Join(s.logTail(10), "\n"))
	}
	return nil
}

// args run a server in the foreground on s.Addr, logging to stdout, with persistence only when asked.
func (s *Server) args() []string {
	host, port, _ := net.SplitHostPort(s.Addr)
	appendonly := "no"
	if s.opts.persist {
		appendonly = "yes"
	}
	args := []string{
		"--bind", host, "--port", port, "--dir", s.dir, "--logfile", "",
		"--daemonize", "no", "--protected-mode", "no", "--save", "",
		"--appendonly", appendonly, "--appendfsync", "always",
		"--proc-title-template", "{title} {listen-addr} " + title(),
	}
	return append(args, s.clusterArgs()...)
}

// title is ProcessMarker, followed by the test run it belongs to when STOCKFLOW_TEST_RUN names one
// (the product's scripts/test.sh does, so that it counts only its own servers as leaked).
func title() string {
	if run := os.Getenv("STOCKFLOW_TEST_RUN"); run != "" {
		return ProcessMarker + " run=" + run
	}
	return ProcessMarker
}

// waitReady waits until the server answers PING; it fails when the process exits first.
func (s *Server) waitReady(p *process) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		DisableIdentity: true})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it answered: %v", p.cmd.ProcessState)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
	}
}

// logTail is the last n lines of the server's log.
func (s *Server) logTail(n int) []string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[max(0, len(lines)-n):]
}

// freePorts returns a free loopback address, and for a cluster node a second free port for its bus.
func freePorts(cluster bool) (addr, busPort string, err error) {
	if addr, err = freeAddr(); err != nil || !cluster {
		return addr, "", err
	}
	for busPort == "" || strings.HasSuffix(addr, ":"+busPort) {
		bus, err := freeAddr()
		if err != nil {
			return "", "", err
		}
		busPort = bus[strings.LastIndexByte(bus, ':')+1:]
	}
	return addr, busPort, nil
}

// freeAddr is a loopback host:port that nothing listens on now. Someone else may take it before the
// server binds it: start then tries another.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
