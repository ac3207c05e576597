package redistest_test

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

func TestRestartWithPersistenceKeepsDataOnTheSameAddress(t *testing.T) {
	s := redistest.Start(t, redistest.WithPersistence())
	addr, c, ctx := s.Addr, s.Client(), context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" || s.Addr != addr {
		t.Fatalf("after restart: %s on %s, %v; want v on %s", got, s.Addr, err, addr)
	}
}

// A test that ends early (Skip and Fatal both end it through runtime.Goexit) still stops its server, even a
// paused one.
func TestCleanupStopsServers(t *testing.T) {
	var addr string
	t.Run("ends early", func(t *testing.T) {
		s := redistest.Start(t)
		addr = s.Addr
		s.Pause()
		t.Skip("ends the subtest early, as a failure would")
	})
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after its test ended: dial %s got %v, want connection refused", addr, err)
	}
}

// The product's scripts/test.sh finds leaked servers by the marker in their process title.
func TestServerTitleCarriesTheMarker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s := redistest.Start(t)
	info, err := s.Client().InfoMap(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(info["Server"]["process_id"])
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), redistest.ProcessMarker) {
		t.Fatalf("process %d title %q, %v; want %s in it", pid, cmdline, err, redistest.ProcessMarker)
	}
}

func TestADroppedReplyIsResentByGoRedisAndRunsTwice(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	defer rdb.Close()
	ctx := context.Background()

	proxy.DropReplyTo("dropped-counter", 1)
	if n, err := rdb.Incr(ctx, "dropped-counter").Result(); err != nil || n != 2 {
		t.Fatalf("INCR through a dropped reply = %d, %v; want 2 (run, reply lost, resent, run again)", n, err)
	}
	if got := proxy.Dropped(); got != 1 {
		t.Fatalf("dropped %d replies, want 1", got)
	}
}

// A failover moves the key's slot to the replica, which the cluster then names as its master.
func TestClusterFailoverMovesTheSlot(t *testing.T) {
	c := redistest.StartCluster(t)
	old := c.MasterOf("k")
	if now := c.Failover("k"); now == old || c.MasterOf("k") != now {
		t.Fatalf("master of k: %s before, %s after the failover, now %s", old.Addr, now.Addr, c.MasterOf("k").Addr)
	}
	if err := c.Client().Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
}
