package producer

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// published is an entry of an orders stream: the event as sent and as the worker decodes it.
type published struct {
	partition int
	raw       order.Order // as published: a basket's lines in the order sent
	decoded   order.Order // by order.Decode
}

// publishedEvents reads every partition's orders stream, each in stream order, and decodes the entries
// as the worker does; one it refuses fails the test.
func publishedEvents(t *testing.T, rdb *redis.Client, cfg Config) []published {
	t.Helper()
	var out []published
	for i, p := range cfg.Partitions() {
		entries, err := rdb.XRange(context.Background(), p.Orders, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			payload, _ := e.Values["payload"].(string)
			ev := published{partition: i}
			if err := json.Unmarshal([]byte(payload), &ev.raw); err != nil {
				t.Fatalf("entry %v: %v", e, err)
			}
			if ev.decoded, err = order.Decode([]byte(payload)); err != nil {
				t.Fatalf("the worker refuses %s: %v", payload, err)
			}
			out = append(out, ev)
		}
	}
	return out
}

// runProducer runs cfg against a Redis of the test's own (with stock for its SKUs) and returns what it
// published and its summary.
func runProducer(t *testing.T, cfg Config) ([]published, *Summary) {
	t.Helper()
	s := redistest.Start(t)
	cfg.RedisURL, cfg.RunID, cfg.SeedStock = s.URL(), "t", 1000
	sum, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return publishedEvents(t, s.Client(), cfg), sum
}

func TestRunPublishesBasketsOfDistinctSKUs(t *testing.T) {
	cfg := DefaultConfig()
	// zipf over few SKUs draws the same best sellers again and again: the duplicates are drawn again.
	cfg.Orders, cfg.SKUs, cfg.Quantity, cfg.Lines, cfg.Distribution, cfg.OrdersPartitions = 300, 6, 3, "2-5", "zipf", 4
	events, sum := runProducer(t, cfg)
	if len(events) != 300 || sum.Published != 300 || sum.Baskets != 300 {
		t.Fatalf("%d events in the streams, %d published, %d baskets; want 300 baskets", len(events), sum.Published, sum.Baskets)
	}
	sizes := map[int]int{}
	lines, unsorted := 0, 0
	for _, e := range events {
		skus := e.raw.SKUs()
		sizes[len(skus)]++
		lines += len(skus)
		if e.raw.SKU != "" || e.raw.Quantity != 0 || len(skus) < 2 || len(skus) > 5 || len(slices.Compact(slices.Sorted(slices.Values(skus)))) != len(skus) {
			t.Errorf("order %s has the SKUs %v: want a basket of 2 to 5 distinct SKUs", e.raw.OrderID, skus)
		}
		if !slices.IsSorted(skus) {
			unsorted++
		}
		for _, l := range e.raw.Lines {
			if l.Quantity != 3 || !strings.HasPrefix(l.SKU, "SKU-") {
				t.Errorf("order %s has the line %+v: want 3 of one of SKU-0..5", e.raw.OrderID, l)
			}
		}
		if want := cfg.PartitionOf(e.decoded.RouteSKU()); e.partition != want {
			t.Errorf("order %s (least SKU %s) is in partition %d, want %d", e.raw.OrderID, e.decoded.RouteSKU(), e.partition, want)
		}
	}
	for n := 2; n <= 5; n++ {
		if sizes[n] < 30 { // 75 expected of each size
			t.Errorf("%d baskets of %d lines (sizes %v): want the sizes spread over 2..5", sizes[n], n, sizes)
		}
	}
	if unsorted < 100 {
		t.Errorf("%d of 300 baskets have their lines out of SKU order: want them in random order", unsorted)
	}
	if sum.Lines != lines {
		t.Errorf("summary counts %d lines, the streams hold %d", sum.Lines, lines)
	}
}

func TestRunPublishesCancelsAndFulfilsInProportion(t *testing.T) {
	const orders = 2000
	for _, tc := range []struct {
		name                   string
		cancel, fulfil         float64
		minCancels, maxCancels int
		minFulfils, maxFulfils int
	}{
		// Bounds 5 standard deviations wide: 600 ± 102 and 400 ± 89.
		{"some cancelled, some fulfilled", 0.3, 0.2, 498, 702, 311, 489},
		{"every order cancelled", 1, 0, orders, orders, 0, 0},
		{"every order fulfilled", 0, 1, 0, 0, orders, orders},
		{"none", 0, 0, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Orders, cfg.SKUs, cfg.Lines, cfg.Cancel, cfg.Fulfil, cfg.OrdersPartitions = orders, 8, "1-3", tc.cancel, tc.fulfil, 3
			events, sum := runProducer(t, cfg)
			reservations, count := lifecycleEvents(t, cfg, events)
			if len(reservations) != orders {
				t.Fatalf("%d orders published, want %d", len(reservations), orders)
			}
			cancels, fulfils := count[order.TypeCancel], count[order.TypeFulfil]
			if cancels < tc.minCancels || cancels > tc.maxCancels || fulfils < tc.minFulfils || fulfils > tc.maxFulfils {
				t.Errorf("%d cancels and %d fulfils of %d orders; want %d..%d and %d..%d", cancels, fulfils, orders,
					tc.minCancels, tc.maxCancels, tc.minFulfils, tc.maxFulfils)
			}
			if sum.Cancels != cancels || sum.Fulfils != fulfils || sum.Published != len(events) {
				t.Errorf("summary: %d cancels, %d fulfils, %d published; the streams hold %d, %d, %d",
					sum.Cancels, sum.Fulfils, sum.Published, cancels, fulfils, len(events))
			}
		})
	}
}

// lifecycleEvents checks the cancel and fulfil events among events: each names an order published
// before it (in its partition or another) and one of that order's SKUs, is routed by that SKU, and an
// order has one at most. It returns the orders by id and the number of events of each type.
func lifecycleEvents(t *testing.T, cfg Config, events []published) (map[string]order.Order, map[order.Type]int) {
	t.Helper()
	orders := map[string]order.Order{}
	for _, e := range events {
		if e.decoded.Kind() == order.TypeReserve {
			orders[e.decoded.OrderID] = e.decoded
		}
	}
	count, followed := map[order.Type]int{}, map[string]bool{}
	for _, e := range events {
		o := e.decoded
		if o.Kind() == order.TypeReserve {
			continue
		}
		count[o.Kind()]++
		order, ok := orders[o.OrderID]
		if !ok || !slices.Contains(order.SKUs(), o.SKU) || followed[o.OrderID] {
			t.Errorf("%s event %+v: want it to name an order of the run and one of its SKUs, once per order", o.Kind(), o)
		}
		followed[o.OrderID] = true
		if want := cfg.PartitionOf(o.SKU); e.partition != want {
			t.Errorf("%s of order %s (sku %s) is in partition %d, want %d", o.Kind(), o.OrderID, o.SKU, e.partition, want)
		}
	}
	return orders, count
}

// With one publishing goroutine, the event of order i comes right after order i+lifecycleLag, or after the
// last order.
func TestLifecycleEventsFollowTheirOrderLater(t *testing.T) {
	const orders = 60
	cfg := DefaultConfig()
	cfg.Orders, cfg.SKUs, cfg.Cancel, cfg.Fulfil, cfg.Rate, cfg.Publishers = orders, 3, 0.5, 0.5, 5000, 1
	events, _ := runProducer(t, cfg)
	if len(events) != 2*orders {
		t.Fatalf("%d events, want %d orders and as many cancels and fulfils", len(events), orders)
	}
	lastOrder := 0 // the number of the last order before the event
	for _, e := range events {
		n := orderNumber(t, e.decoded.OrderID)
		if e.decoded.Kind() == order.TypeReserve {
			lastOrder = n
			continue
		}
		if want := min(n+lifecycleLag, orders); lastOrder != want {
			t.Errorf("the %s of order %d comes after order %d, want right after order %d", e.decoded.Kind(), n, lastOrder, want)
		}
	}
}

// orderNumber is the number of run t's order id t-<n>.
func orderNumber(t *testing.T, id string) int {
	t.Helper()
	digits, ours := strings.CutPrefix(id, "t-")
	n, err := strconv.Atoi(digits)
	if !ours || err != nil {
		t.Fatalf("order id %q is not one of run t", id)
	}
	return n
}
