// Package redisproc runs redis-server processes on free loopback ports, each in a directory of its own,
// with the faults tests and benchmarks inject: kill, pause, resume, restart. internal/redistest wraps it
// for tests; the demo and the benchmark harness use it directly.
//
// A server dies with the process that started it (PR_SET_PDEATHSIG on Linux), and carries the title
// marker ProcessMarker, which scripts/test.sh uses to prove no test left one running.
package redisproc

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
	"time"

	"github.com/redis/go-redis/v9"
)

// ProcessMarker appears in the process title of every server this package starts.
const ProcessMarker = "stockflow-redistest"

// ErrNotInstalled says how to get redis-server when it is missing.
var ErrNotInstalled = errors.New("redis-server not found in PATH: install it with `sudo apt-get install -y redis-server` " +
	"(Debian/Ubuntu), `brew install redis` (macOS), or run scripts/test.sh as root, which installs it")

const startTimeout = 10 * time.Second

// Options configure a server.
type Options struct {
	// Dir holds the server's files; empty: a temporary directory removed by Stop.
	Dir string
	// Persist turns on append-only persistence with fsync on every write, so data written before a Kill
	// or Restart is there again after the restart.
	Persist bool
}

// Server is one redis-server process.
type Server struct {
	// Addr is host:port, stable across restarts.
	Addr string

	opts   Options
	ownDir bool
	bin    string

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc has exited and been reaped
}

// Start starts a server on a free loopback port and waits until it answers.
func Start(opts Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	s := &Server{opts: opts, bin: bin}
	if s.opts.Dir == "" {
		if s.opts.Dir, err = os.MkdirTemp("", "stockflow-redis-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	// A free port found by listening on :0 can be taken by someone else before redis binds it; retry.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err == nil {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			s.mu.Lock()
			err = s.launchLocked()
			s.mu.Unlock()
		}
		if err == nil {
			return s, nil
		}
		if attempt == 4 {
			s.Stop()
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
	}
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Kill sends SIGKILL and waits until the process is gone. Connections are refused afterwards.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Pause stops the process with SIGSTOP: it keeps its port but answers nothing until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Restart kills the process if it runs and starts it again on the same port and directory. Data survives
// only with Persist.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	// The old socket may linger for a moment; redis sets SO_REUSEADDR, so a few retries suffice.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launchLocked()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restart redis-server on %s: %w", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the process and removes its directory if Start made it.
func (s *Server) Stop() {
	s.Kill()
	if s.ownDir {
		_ = os.RemoveAll(s.opts.Dir)
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

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redis-server on %s is not running", s.Addr)
	}
	return s.proc.Process.Signal(sig)
}

func (s *Server) killLocked() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill() // SIGKILL also ends a SIGSTOPped process
	<-s.done
	s.proc, s.done = nil, nil
}

func (s *Server) launchLocked() error {
	host, port, _ := net.SplitHostPort(s.Addr)
	appendonly := "no"
	if s.opts.Persist {
		appendonly = "yes"
	}
	logPath := filepath.Join(s.opts.Dir, "redis.log")
	args := []string{
		"--port", port, "--bind", host, "--dir", s.opts.Dir, "--logfile", logPath,
		"--daemonize", "no", "--protected-mode", "no", "--save", "",
		"--appendonly", appendonly, "--appendfsync", "always",
		"--proc-title-template", "{title} {listen-addr} " + ProcessMarker,
	}
	cmd := exec.Command(s.bin, args...)
	if err := StartChild(cmd); err != nil {
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
