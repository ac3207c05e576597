// Package redistest starts real redis-server processes for tests: one, or several independent ones for
// Redlock, each on a free loopback port in its own temp dir, with fault injection (kill, pause, restart).
//
// Every server is stopped through t.Cleanup, also when the test fails or panics. If the test binary itself
// dies, the kernel kills its servers (PR_SET_PDEATHSIG), so no server outlives the binary. Each process
// carries the title marker ProcessMarker, which scripts/test.sh uses to prove nothing leaked.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProcessMarker appears in the process title of every server this package starts.
const ProcessMarker = "stockflow-redistest"

// InstallHint says how to get redis-server when it is missing.
const InstallHint = "redis-server not found in PATH: install it with `sudo apt-get install -y redis-server` " +
	"(Debian/Ubuntu), `brew install redis` (macOS), or run scripts/test.sh as root, which installs it"

const startTimeout = 10 * time.Second

// Option configures a server.
type Option func(*Server)

// WithPersistence turns on append-only persistence with fsync on every write, so data written before a
// Kill or Restart is there again after the restart.
func WithPersistence() Option { return func(s *Server) { s.persist = true } }

// Server is one redis-server process.
type Server struct {
	// Addr is host:port, stable across restarts.
	Addr string

	t       testing.TB
	dir     string
	persist bool

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc has exited and been reaped
}

// Start starts one server and registers its cleanup with t.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(InstallHint)
	}
	s := &Server{t: t, dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	t.Cleanup(s.stop)
	// A free port found by listening on :0 can be taken by someone else before redis binds it; retry.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.launch(bin)
		if err == nil {
			return s
		}
		if attempt == 4 {
			t.Fatalf("redistest: start redis-server: %v", err)
		}
	}
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

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a new go-redis client for the server, closed when the test ends. It honours context
// deadlines (ContextTimeoutEnabled): without that, go-redis waits out its own timeouts on a paused server.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL and waits until the process is gone. Connections are refused afterwards.
func (s *Server) Kill() {
	s.t.Helper()
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
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.t.Fatal(InstallHint)
	}
	// The old socket may linger for a moment; redis sets SO_REUSEADDR, so a few retries suffice.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launchLocked(bin)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart redis-server on %s: %v", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pid is the process id of the running server, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("redistest: %s is not running", s.Addr)
	}
	if err := s.proc.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v to %s: %v", sig, s.Addr, err)
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill() // SIGKILL also ends a SIGSTOPped process
	<-s.done
	s.proc, s.done = nil, nil
}

func (s *Server) launch(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launchLocked(bin)
}

func (s *Server) launchLocked(bin string) error {
	host, port, _ := net.SplitHostPort(s.Addr)
	appendonly := "no"
	if s.persist {
		appendonly = "yes"
	}
	logPath := filepath.Join(s.dir, "redis.log")
	args := []string{
		"--port", port, "--bind", host, "--dir", s.dir, "--logfile", logPath,
		"--daemonize", "no", "--protected-mode", "no", "--save", "",
		"--appendonly", appendonly, "--appendfsync", "always",
		"--proc-title-template", "{title} {listen-addr} " + ProcessMarker,
	}
	cmd, err := spawn(bin, args)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.proc, s.done = cmd, done

	if err := waitReady(s.Addr, done); err != nil {
		s.killLocked()
		return fmt.Errorf("%w; log tail:\n%s", err, tail(logPath, 10))
	}
	return nil
}

func waitReady(addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %v: %w", addr, startTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
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

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
