package stream

import (
	"context"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestPartitionNames(t *testing.T) {
	c := DefaultConfig()
	if got := c.Partitions(); len(got) != 1 || got[0] != (order.Partition{Orders: "orders", Results: "order-results", Poison: "orders-poison"}) {
		t.Errorf("one partition on one Redis: %+v, want the names as set", got)
	}
	c.Cluster = true
	if got := c.Partitions(); got[0].Orders != "orders:{0}" || got[0].Poison != "orders-poison:{0}" {
		t.Errorf("one partition on a cluster: %+v, want tagged names (a script touches an orders and a poison stream)", got)
	}
	c.Cluster, c.OrdersPartitions = false, 16
	got := c.Partitions()
	if len(got) != 16 || got[7] != (order.Partition{Index: 7, Orders: "orders:{7}", Results: "order-results:{7}", Poison: "orders-poison:{7}"}) {
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
