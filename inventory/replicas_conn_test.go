package inventory_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// WAIT is sent on the connection of the script it is for, right after it, also under concurrent calls:
// the server's MONITOR shows every script followed by a WAIT from the same client address, and nothing
// between them.
func TestReplicaAcksWaitFollowsItsScriptOnTheSameConnection(t *testing.T) {
	ctx := context.Background()
	master, _, mc, _ := replicated(t)
	store := inventory.New(mc, inventory.WithReplicaAcks(1, time.Second))
	if err := store.SetStock(ctx, "SKU-1", 1000); err != nil {
		t.Fatal(err)
	}
	// Loads the script: a call that finds it missing sends EVALSHA and WAIT, then EVAL and WAIT.
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-0", SKU: "SKU-1", Quantity: 1}, 0); err != nil {
		t.Fatal(err)
	}
	stop := monitor(t, master.Addr)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := store.Reserve(ctx, inventory.Order{ID: fmt.Sprintf("o-%d-%d", g, i), SKU: "SKU-1", Quantity: 1}, 0); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if waits := checkWaitsFollowScripts(t, stop(mc)); waits != 40 {
		t.Errorf("%d WAITs for 40 Reserves, want 40", waits)
	}
}

// Through a ClusterClient, whose pipelines route a WAIT (it has no key) to any master, the WAIT still
// follows each script on its connection to the master of the SKU's slot.
func TestReplicaAcksThroughAClusterClientWaitOnTheSKUsMaster(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t)
	store := inventory.New(cluster.Client(), inventory.WithReplicaAcks(1, time.Second))
	skus := []string{"SKU-1", "SKU-2", "SKU-3", "SKU-4", "SKU-5", "SKU-6"} // on more than one master
	reserveAll := func(id string) {
		for _, sku := range skus {
			if _, err := store.Reserve(ctx, inventory.Order{ID: id, SKU: sku, Quantity: 1}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sku := range skus {
		if err := store.SetStock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	reserveAll("o-1") // loads the script on every master
	master := cluster.MasterOf("stock:{SKU-1}")
	opts, err := master.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	node := redis.NewClient(opts)
	t.Cleanup(func() { _ = node.Close() })

	stop := monitor(t, master.Addr)
	reserveAll("o-2")
	if waits := checkWaitsFollowScripts(t, stop(node)); waits == 0 {
		t.Error("no WAIT on the master of SKU-1")
	}
}

// checkWaitsFollowScripts fails the test unless every script in the MONITOR lines is followed on its
// connection (client address) by a WAIT, and every WAIT follows a script there; it returns the WAITs.
func checkWaitsFollowScripts(t *testing.T, lines []string) (waits int) {
	t.Helper()
	line := regexp.MustCompile(`^\+[\d.]+ \[\d+ (\S+)\] "(\w+)"`)
	afterScript := map[string]bool{} // by client address: its last command was a script
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] == "lua" { // the script's own calls
			continue
		}
		addr, cmd := m[1], strings.ToLower(m[2])
		switch {
		case cmd == "wait" && !afterScript[addr]:
			t.Errorf("a WAIT from %s that does not follow a script there: %s", addr, l)
		case cmd != "wait" && afterScript[addr]:
			t.Errorf("a script from %s followed there by %s, not by WAIT", addr, l)
		}
		afterScript[addr] = cmd == "evalsha" || cmd == "eval"
		if cmd == "wait" {
			waits++
		}
	}
	for addr, pending := range afterScript {
		if pending {
			t.Errorf("the last script from %s is followed by no WAIT", addr)
		}
	}
	return waits
}

// monitor runs MONITOR on the server at addr; stop returns the lines it showed until a marker command that
// stop sends through rdb, so that every command sent before stop is among them.
func monitor(t *testing.T, addr string) (stop func(rdb *redis.Client) []string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", ok, err)
	}
	var lines []string
	done := make(chan error, 1)
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				done <- err
				return
			}
			if strings.Contains(l, `"echo" "monitor-end"`) {
				done <- nil
				return
			}
			lines = append(lines, l)
		}
	}()
	return func(rdb *redis.Client) []string {
		t.Helper()
		if err := rdb.Echo(context.Background(), "monitor-end").Err(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := <-done; err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		return lines
	}
}
