package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

func ping(c *redis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestKilledServerRefusesConnections(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	if err := ping(c, time.Second); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	s.Kill()
	_, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after Kill: dial got %v, want connection refused", err)
	}
}

func TestPausedServerTimesOutAndAnswersAfterResume(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	if err := ping(c, time.Second); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	s.Pause()
	err := ping(c, 200*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("paused: got %v, want a timeout", err)
	}
	s.Resume()
	if err := ping(c, time.Second); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func TestRestartWithPersistenceKeepsData(t *testing.T) {
	s := redistest.Start(t, redistest.WithPersistence())
	addr := s.Addr
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if s.Addr != addr {
		t.Fatalf("address changed on restart: %s -> %s", addr, s.Addr)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after restart: got %q, %v; want v", got, err)
	}
}

func TestRestartWithoutPersistenceLosesData(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart without persistence: got %v, want redis.Nil", err)
	}
}

func TestServersAreIndependent(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr] {
			t.Fatalf("duplicate address %s", s.Addr)
		}
		seen[s.Addr] = true
		if err := s.Client().Set(ctx, "who", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	servers[0].Kill()
	for i, s := range servers[1:] {
		got, err := s.Client().Get(ctx, "who").Int()
		if err != nil || got != i+1 {
			t.Fatalf("server %d: got %d, %v; want %d", i+1, got, err, i+1)
		}
	}
}

// TestCleanupStopsServers: a test that ends early (Skip and Fatal both end it through runtime.Goexit) still
// stops its server, even a paused one.
func TestCleanupStopsServers(t *testing.T) {
	var pid int
	t.Run("ends early", func(t *testing.T) {
		s := redistest.Start(t)
		pid = s.Pid()
		s.Pause()
		t.Skip("ends the subtest early, as a failure would")
	})
	if pid == 0 || alive(pid) {
		t.Fatalf("redis-server pid %d still running after its test ended", pid)
	}
}

// TestServerDiesWithPanickingBinary runs this test binary again as a child that starts a server and panics,
// and checks the server does not outlive the child.
func TestServerDiesWithPanickingBinary(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		s := redistest.Start(t)
		fmt.Printf("pid=%d\n", s.Pid())
		panic("child panics with a server running")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithPanickingBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child should have panicked; output:\n%s", out)
	}
	m := regexp.MustCompile(`pid=(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("child printed no pid; output:\n%s", out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server pid %d outlived its panicking test binary", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
