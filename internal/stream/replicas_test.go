package stream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// withReplica starts a master and a replica of it, and waits until the replica acknowledges writes.
func withReplica(t *testing.T) (master *redis.Client, replica *redistest.Server) {
	t.Helper()
	m, r := redistest.Start(t), redistest.Start(t)
	master, ctx := m.Client(), context.Background()
	host, port, _ := strings.Cut(m.Addr, ":")
	master.ConfigSet(ctx, "repl-diskless-sync-delay", "0") // sync at once, not after 5 s
	if err := r.Client().ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for master.Incr(ctx, "probe").Err() != nil || master.Do(ctx, "wait", 1, 100).Val() != int64(1) {
		if time.Now().After(deadline) {
			t.Fatal("the replica never acknowledged a write")
		}
	}
	return master, r
}

// An XADD through Publishing returns once the replica has the entry; while the replica is paused it
// waits, and after the pause the entry is there once: the WAIT is repeated, the XADD is not.
func TestPublishingWaitsForTheReplica(t *testing.T) {
	master, replica := withReplica(t)
	ctx := context.Background()
	pub := Replicas{Acks: 1, Timeout: 200 * time.Millisecond}.Publishing(master)
	id, err := pub.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "a"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := replica.Client().XRange(ctx, "orders", id, id).Val(); len(got) != 1 {
		t.Fatalf("the replica lacks entry %s right after the XADD returned", id)
	}

	replica.Pause()
	time.AfterFunc(time.Second, replica.Resume)
	start := time.Now()
	if _, err := pub.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "b"}}).Result(); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("XADD returned after %v while the replica was paused for 1 s", waited)
	}
	if n := master.XLen(ctx, "orders").Val(); n != 2 {
		t.Errorf("%d entries after two XADDs, one of them waiting through a pause: want 2 (no entry added twice)", n)
	}
	if plain := (Replicas{}).Publishing(master); plain != redis.UniversalClient(master) {
		t.Error("without acks Publishing is not the client itself")
	}
}
