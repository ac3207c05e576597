package stream

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/redistest"
)

func TestPartitionNames(t *testing.T) {
	c := DefaultConfig()
	if got := c.Partitions(); len(got) != 1 || got[0] != (Partition{Orders: "orders", Results: "order-results", Poison: "orders-poison"}) {
		t.Errorf("one partition on one Redis: %+v, want the names as set", got)
	}
	c.Cluster = true
	if got := c.Partitions(); got[0].Orders != "orders:{0}" || got[0].Poison != "orders-poison:{0}" {
		t.Errorf("one partition on a cluster: %+v, want tagged names (a script touches an orders and a poison stream)", got)
	}
	c.Cluster, c.OrdersPartitions = false, 16
	got := c.Partitions()
	if len(got) != 16 || got[7] != (Partition{Index: 7, Orders: "orders:{7}", Results: "order-results:{7}", Poison: "orders-poison:{7}"}) {
		t.Errorf("16 partitions: %+v", got[7])
	}
	for _, sku := range []string{"SKU-0", "SKU-1", "a", "日本"} {
		if want := int(crc32.ChecksumIEEE([]byte(sku)) % 16); c.PartitionOf(sku) != want {
			t.Errorf("PartitionOf(%q) = %d, want %d", sku, c.PartitionOf(sku), want)
		}
	}
	// The documented rule, checked by value (Python: zlib.crc32(b"SKU-1") == 0xee072bb4).
	if c.PartitionOf("SKU-1") != 0xee072bb4%16 {
		t.Errorf("PartitionOf(SKU-1) = %d, want IEEE CRC-32 0xee072bb4 %% 16", c.PartitionOf("SKU-1"))
	}
}

func testReaderConfig(parts []Partition) ReaderConfig {
	return ReaderConfig{Partitions: parts, Group: "g", PoisonMaxLen: 100,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Failing: new(atomic.Int64),
		ReplayFrom: func(time.Time) string { return "0" }}
}

// A reader reads every partition in turn, tags each entry with its partition, claims and deletes consumers
// through names that carry the partition, and poisons an oversized entry into its own partition's poison
// stream.
func TestReaderReadsEveryPartition(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := Config{OrdersStream: "orders", ResultsStream: "results", PoisonStream: "poison", OrdersPartitions: 3}.Partitions()
	ids := map[string]int{} // entry id: partition
	for _, p := range parts {
		if err := rdb.XGroupCreateMkStream(ctx, p.Orders, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			// Entries of different partitions may share an id: the partition tells them apart.
			ids[p.Orders+"/"+rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}}).Val()] = p.Index
		}
	}
	big := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[2].Orders, Values: []string{"payload", strings.Repeat("x", MaxEntryBytes)}}).Val()
	r := NewReader(rdb, testReaderConfig(parts), 1)

	var order []int
	for range 6 {
		xs, err := r.XReadGroup(ctx, &redis.XReadGroupArgs{Consumer: "c1"}).Result()
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := Unmarshaller{}.Unmarshal(xs[0].Messages[0].Values)
		p := EntryPartition(msg)
		if want, ok := ids[xs[0].Stream+"/"+msg.UUID]; !ok || want != p || string(msg.Payload) != parts[p].Orders {
			t.Fatalf("read %s %s tagged partition %d, payload %s", xs[0].Stream, msg.UUID, p, msg.Payload)
		}
		order = append(order, p)
	}
	// Consumer 1 starts at partition 1 and moves on after each entry it reads.
	if want := []int{1, 2, 0, 1, 2, 0}; !slices.Equal(order, want) {
		t.Errorf("partitions read in the order %v, want %v (round robin from the consumer's own)", order, want)
	}
	if _, err := r.XReadGroup(ctx, &redis.XReadGroupArgs{Consumer: "c1"}).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("read of empty partitions: %v, want redis.Nil", err)
	}
	if n := rdb.XLen(ctx, parts[2].Poison).Val(); n != 1 || rdb.XLen(ctx, parts[0].Poison).Val() != 0 {
		t.Errorf("oversized entry %s of partition 2: %d in its poison stream, want 1 there and none elsewhere", big, n)
	}

	// Every entry is pending for c1; claims look at one partition per round, in turn.
	claimed := map[string]bool{}
	for range 3 {
		pending, err := r.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders", Group: "g", Start: "0", End: "+", Count: 10}).Result()
		if err != nil || len(pending) != 2 {
			t.Fatalf("pending %v (%v), want the 2 entries of one partition", pending, err)
		}
		var names []string
		for _, p := range pending {
			names = append(names, p.ID)
		}
		msgs, err := r.XClaim(ctx, &redis.XClaimArgs{Stream: "orders", Group: "g", Consumer: "c2", Messages: names}).Result()
		if err != nil || len(msgs) != 2 {
			t.Fatalf("claimed %v (%v), want 2 entries", msgs, err)
		}
		for _, name := range names {
			claimed[name] = true
		}
	}
	if len(claimed) != 6 {
		t.Errorf("claimed %d distinct entries in 3 rounds, want all 6 of the 3 partitions", len(claimed))
	}
	for _, p := range parts {
		if n := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.Orders, Group: "g", Start: "-", End: "+", Count: 10, Consumer: "c2"}).Val(); len(n) != 2 {
			t.Errorf("%s: %d entries pending for c2 after the claims, want 2", p.Orders, len(n))
		}
	}
	if _, err := r.XClaim(ctx, &redis.XClaimArgs{Consumer: "c2", Messages: []string{"7/1-1"}}).Result(); err == nil {
		t.Error("claim of an entry of partition 7 of 3 succeeded, want an error")
	}

	// Consumers: c1 has nothing pending any more; it is deleted where it is named.
	consumers, err := r.XInfoConsumers(ctx, "orders", "g").Result()
	if err != nil || len(consumers) != 2 {
		t.Fatalf("consumers %v (%v)", consumers, err)
	}
	i := slices.IndexFunc(consumers, func(c redis.XInfoConsumer) bool { return strings.HasSuffix(c.Name, "/c1") })
	if i < 0 {
		t.Fatalf("consumers %v: no c1", consumers)
	}
	if err := r.XGroupDelConsumer(ctx, "orders", "g", consumers[i].Name).Err(); err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, p := range parts {
		if !slices.ContainsFunc(rdb.XInfoConsumers(ctx, p.Orders, "g").Val(), func(c redis.XInfoConsumer) bool { return c.Name == "c1" }) {
			deleted++
		}
	}
	if deleted != 1 {
		t.Errorf("c1 gone from %d partitions' groups, want exactly the one named", deleted)
	}
}

// The first process records the number of partitions; one with another number is refused, naming both.
func TestCheckLayout(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	c := DefaultConfig()
	c.OrdersPartitions = 4
	for range 2 {
		if err := c.CheckLayout(ctx, rdb); err != nil {
			t.Fatalf("4 partitions where 4 are recorded (or none): %v", err)
		}
	}
	if got := rdb.Get(ctx, "orders:partitions").Val(); got != "4" {
		t.Fatalf("recorded %q, want 4", got)
	}
	c.OrdersPartitions = 16
	err := c.CheckLayout(ctx, rdb)
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "ORDERS_PARTITIONS is 16") || !strings.Contains(err.Error(), "laid out with 4") {
		t.Fatalf("16 partitions where 4 are recorded: %v, want ErrLayout naming both", err)
	}
}

// A partition whose reads fail (here a key of the wrong type; in production a cluster node that is down)
// does not keep the reader from the others: their entries are read, an empty pass is no error, and the
// failure shows in ReaderConfig.Failing. Only when every partition fails does the read fail.
func TestReaderSkipsAFailingPartition(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	parts := Config{OrdersStream: "orders", ResultsStream: "results", PoisonStream: "poison", OrdersPartitions: 3}.Partitions()
	for _, p := range []Partition{parts[0], parts[2]} {
		if err := rdb.XGroupCreateMkStream(ctx, p.Orders, "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: p.Orders, Values: []string{"payload", p.Orders}})
	}
	rdb.Set(ctx, parts[1].Orders, "not a stream", 0)
	cfg := testReaderConfig(parts)
	r := NewReader(rdb, cfg, 1) // starts at the failing partition
	var read []string
	for range 3 {
		xs, err := r.XReadGroup(ctx, &redis.XReadGroupArgs{Consumer: "c"}).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatalf("read failed while two partitions work: %v", err)
		default:
			read = append(read, xs[0].Stream)
		}
	}
	slices.Sort(read)
	if !slices.Equal(read, []string{parts[0].Orders, parts[2].Orders}) {
		t.Errorf("read %v, want the entries of the two working partitions", read)
	}
	if cfg.Failing.Load() == 0 {
		t.Error("a partition fails, but the reads are not marked failing")
	}

	for _, p := range []Partition{parts[0], parts[2]} {
		rdb.Del(ctx, p.Orders)
		rdb.Set(ctx, p.Orders, "not a stream either", 0)
	}
	all := NewReader(rdb, testReaderConfig(parts), 0)
	if err := all.XReadGroup(ctx, &redis.XReadGroupArgs{Consumer: "c"}).Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Errorf("every partition failing: %v, want their error", err)
	}
}

func TestPartitionedNamesCarryNoTagOfTheirOwn(t *testing.T) {
	c := DefaultConfig()
	c.ResultsStream = "results{x}"
	if err := c.Validate(); err != nil {
		t.Errorf("braces with one partition on one Redis: %v, want accepted (no tag is added)", err)
	}
	c.OrdersPartitions = 4
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "RESULTS_STREAM") {
		t.Errorf("braces with 4 partitions: %v, want RESULTS_STREAM refused", err)
	}
}
