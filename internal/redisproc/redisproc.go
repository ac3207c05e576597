// Package redisproc runs redis-server processes on free loopback ports, each in a directory of its own,
// with the faults tests and benchmarks inject: kill, pause, resume, restart. StartCluster joins such
// servers into a Redis Cluster whose masters fail over to their replicas. testkit/redistest wraps it for
// tests; the demo and the benchmark harness use it directly.
//
// A server is an internal/childproc child: it dies with the process that started it (PR_SET_PDEATHSIG on
// Linux). It carries the title marker ProcessMarker, which scripts/test.sh uses to prove no test left one
// running.
package redisproc

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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/childproc"
	"github.com/stockflow/stockflow/internal/netns"
)

// ProcessMarker appears in the process title of every server this package starts.
const ProcessMarker = "stockflow-redistest"

// ErrNotInstalled says how to get redis-server when it is missing.
var ErrNotInstalled = errors.New("redis-server not found in PATH: install it with `sudo apt-get install -y redis-server` " +
	"(Debian/Ubuntu), `brew install redis` (macOS), or run scripts/test.sh as root, which installs it")

const (
	startTimeout = 10 * time.Second
	// startAttempts: a free port can be taken by someone else before redis binds it; Start tries new ones.
	startAttempts = 5
)

// Options configure a server.
type Options struct {
	// Dir holds the server's files; empty: a temporary directory removed by Stop.
	Dir string
	// Persist turns on append-only persistence with fsync on every write, so data written before a Kill
	// or Restart is there again after the restart.
	Persist bool
	// Host runs the server in a network namespace of its own (partition tests), listening on the host's
	// address at port 6379; nil: the test's namespace, on a free loopback port.
	Host *netns.Host
	// TLS serves TLS only: no plain port (port 0), tls-port on Addr, with these files; nil: plain TCP.
	TLS *TLS
	// ACLFile is the server's ACL file (--aclfile): the users it lists are the only ones. The server's own
	// checks, and URL, log in as User with Password, whom the file must enable.
	ACLFile        string
	User, Password string
	// Cluster runs the server as a Redis Cluster node (cluster-enabled, its state in nodes.conf in Dir), its
	// cluster bus on a port of its own; StartCluster joins such nodes into a cluster.
	Cluster bool
	// NodeTimeout is the cluster-node-timeout of a Cluster node: how long a node may not answer before the
	// others count it as failing and its replica takes over. Default DefaultNodeTimeout (1 s).
	NodeTimeout time.Duration
}

// Server is one redis-server process.
type Server struct {
	// Addr is host:port, stable across restarts.
	Addr string

	opts    Options
	ownDir  bool
	bin     string
	busPort string // a Cluster node's cluster bus port, stable across restarts

	mu    sync.Mutex
	child *childproc.Process // nil when not running
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
	if err := s.launchOnFreePort(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	return s, nil
}

// Kill sends SIGKILL and waits until the process is gone. Connections are refused afterwards.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Pause stops the process with SIGSTOP: it keeps its port but answers nothing until Resume.
func (s *Server) Pause() error { return s.running((*childproc.Process).Pause) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.running((*childproc.Process).Resume) }

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
			return fmt.Errorf("restart: %w", err)
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
	if s.child == nil {
		return 0
	}
	return s.child.Pid()
}

// LogTail is the last n lines of the server's log, also after it was killed.
func (s *Server) LogTail(n int) []string {
	data, _ := os.ReadFile(filepath.Join(s.opts.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[max(0, len(lines)-n):]
}

// running applies do to the process, or fails when it is not running.
func (s *Server) running(do func(*childproc.Process) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.child == nil {
		return fmt.Errorf("redis-server on %s is not running", s.Addr)
	}
	return do(s.child)
}

func (s *Server) killLocked() {
	if s.child != nil {
		s.child.Kill()
		s.child = nil
	}
}

func (s *Server) launchOnFreePort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Host != nil { // a namespace of its own: every port is free
		s.Addr = net.JoinHostPort(s.opts.Host.IP, "6379")
		return s.launchLocked()
	}
	var err error
	for range startAttempts {
		if s.Addr, s.busPort, err = freePorts(s.opts.Cluster); err == nil {
			if err = s.launchLocked(); err == nil {
				return nil
			}
		}
	}
	return err
}

func (s *Server) launchLocked() error {
	cmd := exec.Command(s.bin, s.args()...)
	if s.opts.Host != nil {
		cmd = s.opts.Host.Command(s.bin, s.args()...)
	}
	child, err := childproc.Start(cmd, filepath.Join(s.opts.Dir, "redis.log"))
	if err != nil {
		return err
	}
	s.child = child
	if err := s.waitReady(child); err != nil {
		s.killLocked()
		return fmt.Errorf("redis-server on %s: %w; log tail:\n%s", s.Addr, err, strings.Join(child.LogTail(10), "\n"))
	}
	return nil
}

// args run a server in the foreground on s.Addr, logging to stdout (the child's log file), with
// persistence only when asked, and the listener (listenArgs) and users (aclArgs) of the options.
func (s *Server) args() []string {
	host, port, _ := net.SplitHostPort(s.Addr)
	appendonly := "no"
	if s.opts.Persist {
		appendonly = "yes"
	}
	args := []string{
		"--bind", host, "--dir", s.opts.Dir, "--logfile", "",
		"--daemonize", "no", "--protected-mode", "no", "--save", "",
		"--appendonly", appendonly, "--appendfsync", "always",
		"--proc-title-template", "{title} {listen-addr} " + title(),
	}
	args = append(args, s.listenArgs(port)...)
	args = append(args, s.clusterArgs()...)
	return append(args, s.aclArgs()...)
}

// title is ProcessMarker, followed by the test run it belongs to when STOCKFLOW_TEST_RUN names one
// (scripts/test.sh does, so that it counts only its own servers as leaked, not a concurrent run's).
func title() string {
	if run := os.Getenv("STOCKFLOW_TEST_RUN"); run != "" {
		return ProcessMarker + " run=" + run
	}
	return ProcessMarker
}

// waitReady waits until the server answers PING, over TLS and logged in as User when so configured.
func (s *Server) waitReady(child *childproc.Process) error {
	opts, err := s.ClientOptions()
	if err != nil {
		return err
	}
	opts.MaxRetries, opts.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeoutCause(context.Background(), startTimeout, fmt.Errorf("not ready after %v", startTimeout))
	defer cancel()
	return child.WaitReady(ctx, 5*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	})
}
