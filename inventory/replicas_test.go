package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/stock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// replicated starts a master and a replica of it, and returns them with a client of each once the replica
// acknowledges writes, with the master's command statistics reset.
func replicated(t *testing.T) (master, replica *redistest.Server, mc, rc *redis.Client) {
	t.Helper()
	ctx := context.Background()
	master, replica = redistest.Start(t), redistest.Start(t)
	mc, rc = master.Client(), replica.Client()
	// The first sync starts at once instead of after 5 s.
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(master.Addr)
	if err := rc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(info(t, mc, "replication"), ",state=online,"); {
		if time.Now().After(deadline) {
			t.Fatalf("the replica is not online after 10s:\n%s", info(t, mc, "replication"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Online, a replica may still take up to a second to acknowledge its first write. (A write that leaves
	// nothing behind, and WAIT on its connection.)
	var wait *redis.Cmd
	if _, err := mc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "replicated", 1, 0)
		p.Del(ctx, "replicated")
		wait = p.Do(ctx, "wait", 1, 10_000)
		return nil
	}); err != nil || wait.Val() != int64(1) {
		t.Fatalf("the replica did not acknowledge within 10s: %v, %v", wait.Val(), err)
	}
	if err := mc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return master, replica, mc, rc
}

func info(t *testing.T, rdb *redis.Client, section string) string {
	t.Helper()
	s, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// infoInt reads the integer that follows prefix in an INFO section, 0 when there is none.
func infoInt(t *testing.T, rdb *redis.Client, section, prefix string) int64 {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `(\d+)`).FindStringSubmatch(info(t, rdb, section))
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// A write with replica acks returns once the replica has it: read from the replica right after the call,
// it is there; and while the replica is paused the call does not return.
func TestReplicaAcksReplicaHasTheWriteWhenTheCallReturns(t *testing.T) {
	ctx := context.Background()
	master, replica, mc, rc := replicated(t)
	spans := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	store := inventory.New(mc, inventory.WithReplicaAcks(1, time.Second), inventory.WithOutcomeTTL(time.Minute))

	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rc, "SKU-1"), map[string]string{"available": "10", "reserved": "0"})
	if _, err := store.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}, 0); err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rc, "SKU-1"), map[string]string{"available": "7", "reserved": "3"})
	batch := batchOf("SKU-1", inventory.Order{ID: "o-2", Quantity: 1}, inventory.Order{ID: "o-3", Quantity: 2})
	if _, err := store.ReserveBatch(ctx, batch, 0); err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rc, "SKU-1"), map[string]string{"available": "4", "reserved": "6"})
	if got, w := records(t, rc, "SKU-1"), records(t, mc, "SKU-1"); fmt.Sprint(got) != fmt.Sprint(w) || len(got) != 3 {
		t.Fatalf("the replica's records %v, want the master's %v", got, w)
	}
	ended := spans.Ended()
	if acks := attr(ended[len(ended)-1], inventory.AttrReplicaAcks); acks != "1" {
		t.Errorf("the batch span's replica acks = %q, want 1", acks)
	}

	// A client whose ReadTimeout outlasts a 10 s WAIT: the call waits for the paused replica.
	opts, err := master.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts.ReadTimeout = 20 * time.Second
	slow := redis.NewClient(opts)
	t.Cleanup(func() { _ = slow.Close() })
	store = inventory.New(slow, inventory.WithReplicaAcks(1, 10*time.Second))
	replica.Pause()
	done := make(chan error, 1)
	go func() {
		_, err := store.Reserve(ctx, inventory.Order{ID: "o-4", SKU: "SKU-1", Quantity: 4}, 0)
		done <- err
	}()
	select {
	case err := <-done:
		replica.Resume()
		t.Fatalf("Reserve returned (%v) while the replica was paused", err)
	case <-time.After(300 * time.Millisecond):
	}
	replica.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want(t, stockHash(t, rc, "SKU-1"), map[string]string{"available": "0", "reserved": "10"})
}

// attr is the value of the span's attribute key, "" when it has none.
func attr(sp sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// With the replica paused the write times out with ErrReplicaAcks but stays applied on the master; once
// the replica is back, the same Reserve again (from another client, so on another connection) replays
// the outcome without a second decrement and returns only when the replica has it.
func TestReplicaAcksTimeoutThenRetryReplaysOnce(t *testing.T) {
	ctx := context.Background()
	master, replica, mc, rc := replicated(t)
	opts := []inventory.Option{inventory.WithReplicaAcks(1, 300*time.Millisecond), inventory.WithOutcomeTTL(time.Minute)}
	store := inventory.New(mc, opts...)
	if err := store.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	o := inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 3}

	replica.Pause()
	_, err := store.Reserve(ctx, o, 0)
	replica.Resume()
	if !errors.Is(err, inventory.ErrReplicaAcks) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged the write within 300ms") {
		t.Fatalf("Reserve with the replica paused: %v, want ErrReplicaAcks saying 0 of 1 within 300ms", err)
	}
	want(t, stockHash(t, mc, "SKU-1"), map[string]string{"available": "7", "reserved": "3"})

	out, err := inventory.New(master.Client(), opts...).Reserve(ctx, o, 0)
	if err != nil || !out.Replayed || out.Status != order.StatusReserved || out.AvailableAfter != 7 {
		t.Fatalf("the retry: %+v, %v; want the reservation replayed, 7 left", out, err)
	}
	want(t, stockHash(t, mc, "SKU-1"), map[string]string{"available": "7", "reserved": "3"})
	want(t, stockHash(t, rc, "SKU-1"), map[string]string{"available": "7", "reserved": "3"})
	if got, w := records(t, rc, "SKU-1"), records(t, mc, "SKU-1"); fmt.Sprint(got) != fmt.Sprint(w) || len(got) != 1 {
		t.Fatalf("the replica's records %v, want the master's %v", got, w)
	}
}

// With replica acks a replay writes what it replays again, unchanged, so that it propagates: Redis 7.2
// and later let a WAIT cover only its connection's writes, and a replay on a connection that did not
// write would otherwise be acknowledged at once. Without them a replay writes nothing. (Writes are
// counted as the server's changes since the last save: the replication offset also moves when a WAIT
// asks the replicas for their acks.)
func TestReplicaAcksMakeReplaysPropagate(t *testing.T) {
	ctx := context.Background()
	_, _, mc, _ := replicated(t)
	off := inventory.New(mc, inventory.WithOutcomeTTL(time.Minute))
	on := inventory.New(mc, inventory.WithReplicaAcks(1, time.Second), inventory.WithOutcomeTTL(time.Minute))
	if err := off.SetStock(ctx, "SKU-1", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := off.Reserve(ctx, inventory.Order{ID: "o-1", SKU: "SKU-1", Quantity: 2}, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := off.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-2", Quantity: 1}), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := off.Release(ctx, "o-1", "SKU-1", 5); err != nil {
		t.Fatal(err)
	}
	if err := off.RaiseFence(ctx, "SKU-1", 5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		replay func(*inventory.Store) error
	}{
		{"a replayed Reserve", func(s *inventory.Store) error {
			_, err := s.Reserve(ctx, inventory.Order{ID: "o-2", SKU: "SKU-1", Quantity: 1}, 5)
			return err
		}},
		{"a batch of replays", func(s *inventory.Store) error {
			_, err := s.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: "o-2", Quantity: 1}, inventory.Order{ID: "o-1", Quantity: 2}), 5)
			return err
		}},
		{"a replayed Release", func(s *inventory.Store) error {
			_, err := s.Release(ctx, "o-1", "SKU-1", 5)
			return err
		}},
		{"a RaiseFence to the stored fence", func(s *inventory.Store) error { return s.RaiseFence(ctx, "SKU-1", 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stockBefore, recordsBefore := stockHash(t, mc, "SKU-1"), records(t, mc, "SKU-1")
			for _, c := range []struct {
				store  *inventory.Store
				writes bool
			}{{off, false}, {on, true}} {
				before := infoInt(t, mc, "persistence", "rdb_changes_since_last_save:")
				if err := tc.replay(c.store); err != nil {
					t.Fatal(err)
				}
				if wrote := infoInt(t, mc, "persistence", "rdb_changes_since_last_save:") > before; wrote != c.writes {
					t.Errorf("with replica acks %v the replay wrote: %v", c.writes, wrote)
				}
			}
			want(t, stockHash(t, mc, "SKU-1"), stockBefore)
			if got := records(t, mc, "SKU-1"); fmt.Sprint(got) != fmt.Sprint(recordsBefore) {
				t.Errorf("records %v after the replays, want them unchanged: %v", got, recordsBefore)
			}
		})
	}
}

// Without replica acks no write sends a WAIT; with them every write sends exactly one.
func TestReplicaAcksOffSendsNoWait(t *testing.T) {
	ctx := context.Background()
	_, _, mc, _ := replicated(t)
	writes := func(s *inventory.Store, order string) {
		t.Helper()
		_, err1 := s.Restock(ctx, "SKU-1", 5)
		err2 := s.SetStock(ctx, "SKU-1", 10)
		_, err3 := s.Reserve(ctx, inventory.Order{ID: order + "a", SKU: "SKU-1", Quantity: 1}, 0)
		_, err4 := s.ReserveBatch(ctx, batchOf("SKU-1", inventory.Order{ID: order + "b", Quantity: 1}), 0)
		_, err5 := s.Release(ctx, order+"a", "SKU-1", 0)
		err6 := s.RaiseFence(ctx, "SKU-1", 1)
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			t.Fatal(err)
		}
	}
	waits := func() int64 { return infoInt(t, mc, "commandstats", "cmdstat_wait:calls=") }

	writes(inventory.New(mc), "off-") // also loads every script, so the next calls send no EVAL after NOSCRIPT
	if n := waits(); n != 0 {
		t.Fatalf("without replica acks: %d WAITs, want none", n)
	}
	writes(inventory.New(mc, inventory.WithReplicaAcks(1, time.Second)), "on-")
	if n := waits(); n != 6 {
		t.Fatalf("with replica acks: %d WAITs for 6 writes, want 6", n)
	}
}

// The errors say why a write could not be acknowledged, and a WAIT the client could not wait for is
// refused before anything is written.
func TestReplicaAcksErrorsSayWhy(t *testing.T) {
	ctx := context.Background()
	master, _, mc, rc := replicated(t)

	err := inventory.New(mc, inventory.WithReplicaAcks(2, 200*time.Millisecond)).SetStock(ctx, "SKU-1", 1)
	if !errors.Is(err, inventory.ErrReplicaAcks) || !regexp.MustCompile(`[01] of 2 replicas acknowledged the write within 200ms`).MatchString(err.Error()) {
		t.Errorf("2 acks from a master with 1 replica: %v", err)
	}

	onReplica := inventory.New(rc, inventory.WithReplicaAcks(1, time.Second))
	if err := onReplica.SetStock(ctx, "SKU-2", 1); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("a write on the replica: %v, want Redis's READONLY refusal", err)
	}
	// RaiseFence on an unknown SKU writes nothing, so the script runs on the replica and WAIT answers.
	if err := onReplica.RaiseFence(ctx, "SKU-2", 1); err == nil || errors.Is(err, inventory.ErrReplicaAcks) ||
		!strings.Contains(err.Error(), "WAIT cannot be used with replica instances") {
		t.Errorf("WAIT on the replica: %v, want Redis's refusal", err)
	}

	opts, err := master.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	opts.ReadTimeout = time.Second
	short := redis.NewClient(opts)
	t.Cleanup(func() { _ = short.Close() })
	err = inventory.New(short, inventory.WithReplicaAcks(1, time.Second)).SetStock(ctx, "SKU-3", 1)
	if err == nil || !strings.Contains(err.Error(), "needs a client ReadTimeout of at least 1.5s, not 1s") {
		t.Errorf("a WAIT as long as the ReadTimeout: %v", err)
	}
	if n := mc.Exists(ctx, "stock:{SKU-3}").Val(); n != 0 {
		t.Errorf("the refused SetStock wrote the stock")
	}
}

// With replica acks a round of several batches and a basket is not one pipeline of scripts: each write is
// followed by its own WAIT on its connection, so every batch that returns decided is on the replica. (A
// pipeline of the scripts would return them decided with no WAIT at all: durability silently gone.)
func TestReplicaAcksEveryBatchOfARoundWaitsForTheReplica(t *testing.T) {
	ctx := context.Background()
	_, _, mc, rc := replicated(t)
	store := inventory.New(mc, inventory.WithReplicaAcks(1, time.Second), inventory.WithOutcomeTTL(time.Minute))
	for _, sku := range []string{"A", "B", "C", "D"} {
		if err := store.SetStock(ctx, sku, 5); err != nil {
			t.Fatal(err)
		}
	}
	round := func(prefix string) []inventory.BatchResult {
		return store.ReserveBatches(ctx, []inventory.Batch{
			{Ctx: ctx, Orders: batchOf("A", inventory.Order{ID: prefix + "a1", Quantity: 1}, inventory.Order{ID: prefix + "a2", Quantity: 1})},
			{Ctx: ctx, Orders: batchOf("B", inventory.Order{ID: prefix + "b1", Quantity: 2})},
			{Ctx: ctx, Basket: &inventory.Basket{OrderID: prefix + "cd", Lines: []order.Line{{SKU: "C", Quantity: 1}, {SKU: "D", Quantity: 1}},
				Fences: inventory.Fences{"C": 0, "D": 0}}},
		})
	}
	round("warm-") // Redis learns the scripts: a pipeline's NOSCRIPT would send each batch alone, with its WAIT
	if err := mc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	results := round("")
	for i, r := range results {
		if r.Err != nil {
			t.Fatalf("batch %d: %v", i, r.Err)
		}
	}
	if n := infoInt(t, mc, "commandstats", "cmdstat_wait:calls="); n < 3 {
		t.Errorf("%d WAITs for a round of 3 writes (2 batches, 1 basket), want one after each", n)
	}
	for sku, want := range map[string]string{"A": "1", "B": "1", "C": "3", "D": "3"} {
		if got := rc.HGet(ctx, stock.Key(sku), "available").Val(); got != want {
			t.Errorf("replica right after the round: %s available %q, want %s", sku, got, want)
		}
	}
}
