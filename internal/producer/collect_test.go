package producer

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/order"
)

func TestPercentile(t *testing.T) {
	oneToTen := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []int
		p      float64
		want   int
	}{
		{"no values give the zero value", nil, 0.5, 0},
		{"one value is every percentile", []int{7}, 0.99, 7},
		{"the median of ten rounds the rank down", oneToTen, 0.50, 5},
		{"p99 of ten is the ninth", oneToTen, 0.99, 9},
		{"p0 is the smallest", oneToTen, 0, 1},
		{"p100 is the largest", oneToTen, 1, 10},
		{"p95 of a hundred", oneToHundred, 0.95, 95},
		{"p99 of a hundred", oneToHundred, 0.99, 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %d, want %d", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestLockWait(t *testing.T) {
	skus := func(waits ...float64) map[string]*SKUSummary {
		m := map[string]*SKUSummary{}
		for i, w := range waits {
			m[fmt.Sprint("SKU-", i)] = &SKUSummary{LockWaitMs: w}
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		waits []float64
		skus  map[string]*SKUSummary
		want  LockWait
	}{
		{"no orders waited", nil, skus(0, 0), LockWait{}},
		{
			"unsorted waits are sorted first",
			[]float64{4, 1, 3, 2}, skus(10),
			LockWait{P50: 2, P95: 3, P99: 3, Max: 4, HotSKUs: []string{"SKU-0"}},
		},
		{
			"the five SKUs that waited most, most first and ties by name; those that never waited are left out",
			[]float64{0.5}, skus(5, 0, 9, 5, 1, 2, 3),
			LockWait{P50: 0.5, P95: 0.5, P99: 0.5, Max: 0.5, HotSKUs: []string{"SKU-2", "SKU-0", "SKU-3", "SKU-6", "SKU-5"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lockWait(tc.waits, tc.skus)
			if got.P50 != tc.want.P50 || got.P95 != tc.want.P95 || got.P99 != tc.want.P99 || got.Max != tc.want.Max ||
				!slices.Equal(got.HotSKUs, tc.want.HotSKUs) {
				t.Errorf("lockWait = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCollectorAdd feeds a collector the events a run's streams could hold and checks what it counted.
func TestCollectorAdd(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sum := &Summary{SKUs: map[string]*SKUSummary{"SKU-0": {}, "SKU-1": {}}}
	c := newCollector(Config{Config: stream.DefaultConfig()}, sum, map[eventKey]placedOrder{
		{order.TypeReserve, "r-1"}: {lines: []order.Line{{SKU: "SKU-0", Quantity: 2}}, placedAt: t0},
		{order.TypeReserve, "r-2"}: {lines: []order.Line{{SKU: "SKU-1", Quantity: 1}}, placedAt: t0.Add(time.Second)},
		{order.TypeReserve, "r-3"}: {lines: []order.Line{{SKU: "SKU-0", Quantity: 1}}, placedAt: t0},
	}, newBar(nil, "", 0))
	result := func(id, order, sku, status string, qty int, processed time.Duration, waitMs float64) redis.XMessage {
		return redis.XMessage{ID: id, Values: map[string]any{"payload": fmt.Sprintf(
			`{"order_id":%q,"sku":%q,"quantity":%d,"status":%q,"processed_at":%q,"lock_wait_ms":%v}`,
			order, sku, qty, status, t0.Add(processed).Format(time.RFC3339Nano), waitMs)}}
	}
	if c.pending() != 3 {
		t.Fatalf("pending %d before any event, want 3", c.pending())
	}
	c.add([]redis.XStream{
		{Stream: "order-results", Messages: []redis.XMessage{
			result("1-0", "r-1", "SKU-0", "reserved", 2, 2*time.Second, 10),
			result("2-0", "other-1", "SKU-0", "reserved", 5, time.Second, 100), // another run's
			{ID: "3-0", Values: map[string]any{"payload": "not json"}},
			result("4-0", "r-2", "SKU-1", "rejected", 1, 4*time.Second, 0),
			result("5-0", "r-1", "SKU-0", "reserved", 2, 5*time.Second, 0), // a redelivery, same outcome
		}},
		{Stream: "orders-poison", Messages: []redis.XMessage{
			{ID: "7-0", Values: map[string]any{"payload": `{"order_id":"other-2","sku":"SKU-0","quantity":1}`}},
			{ID: "8-0", Values: map[string]any{"payload": `{"order_id":"r-3","sku":"SKU-0","quantity":1}`}},
			{ID: "9-0", Values: map[string]any{"payload": `{"order_id":"r-3","sku":"SKU-0","quantity":1}`}}, // poisoned twice
		}},
	})
	c.add([]redis.XStream{{Stream: "order-results", Messages: []redis.XMessage{
		result("6-0", "r-1", "SKU-0", "rejected", 2, 6*time.Second, 0), // an outcome that contradicts the first
	}}})
	if c.pending() != 0 {
		t.Fatalf("pending %d after every order has an outcome or is poisoned, want 0", c.pending())
	}
	c.finish()
	c.settle()

	if sum.Reserved != 1 || sum.Rejected != 1 || sum.Poisoned != 1 || sum.Outcomes != 2 || sum.Duplicates != 2 {
		t.Errorf("counted %d reserved, %d rejected, %d poisoned, %d outcomes, %d duplicates; want 1, 1, 1, 2, 2",
			sum.Reserved, sum.Rejected, sum.Poisoned, sum.Outcomes, sum.Duplicates)
	}
	if want := []string{"order r-1 has outcomes reserved and rejected"}; !slices.Equal(sum.Problems, want) {
		t.Errorf("problems %q, want %q", sum.Problems, want)
	}
	if k := sum.SKUs["SKU-0"]; !reflect.DeepEqual(*k, SKUSummary{OrdersReserved: 2, LockWaitMs: 10, DecidedBy: map[string]int{"": 1}}) {
		t.Errorf("SKU-0 %+v, want 2 reserved by the run, 10 ms of lock wait, one order decided", *k)
	}
	if k := sum.SKUs["SKU-1"]; !reflect.DeepEqual(*k, SKUSummary{OrdersRejected: 1, DecidedBy: map[string]int{"": 1}}) {
		t.Errorf("SKU-1 %+v, want 1 order rejected", *k)
	}
	// Latencies 2 s (r-1) and 3 s (r-2); the first order was placed at t0, the last outcome came at t0+4s.
	if sum.LatencyP50 != 2*time.Second || sum.LatencyP99 != 2*time.Second || sum.Throughput != 0.5 {
		t.Errorf("p50 %v, p99 %v, %v orders/s; want 2s, 2s (ranks round down), 0.5", sum.LatencyP50, sum.LatencyP99, sum.Throughput)
	}
	if lw := sum.LockWait; lw.P50 != 0 || lw.Max != 10 || !slices.Equal(lw.HotSKUs, []string{"SKU-0"}) {
		t.Errorf("lock wait %+v, want p50 0, max 10, hot SKU-0", lw)
	}
}

// Busiest is the SKU with the most orders decided; BusiestShare is its top worker's share of them.
func TestAnEventPoisonedAndDecidedLeavesTheOthersPending(t *testing.T) {
	poison := redis.XStream{Stream: "orders-poison", Messages: []redis.XMessage{
		{ID: "1-0", Values: map[string]any{"payload": `{"order_id":"r-1","sku":"SKU-0","quantity":1}`}}}}
	outcome := redis.XStream{Stream: "order-results", Messages: []redis.XMessage{
		{ID: "1-0", Values: map[string]any{"payload": `{"order_id":"r-1","sku":"SKU-0","quantity":1,"status":"reserved"}`}}}}
	for _, tc := range []struct {
		name   string
		events []redis.XStream
	}{
		{"poisoned by one consumer, then decided by another that ran it meanwhile", []redis.XStream{poison, outcome}},
		{"decided, then poisoned by a consumer that claimed it meanwhile", []redis.XStream{outcome, poison}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := &Summary{SKUs: map[string]*SKUSummary{"SKU-0": {}}}
			line := []order.Line{{SKU: "SKU-0", Quantity: 1}}
			c := newCollector(Config{Config: stream.DefaultConfig()}, sum, map[eventKey]placedOrder{
				{order.TypeReserve, "r-1"}: {lines: line}, {order.TypeReserve, "r-2"}: {lines: line},
			}, newBar(nil, "", 0))
			for _, e := range tc.events {
				c.add([]redis.XStream{e})
			}
			if c.pending() != 1 {
				t.Errorf("pending %d, want 1: r-2 has neither an outcome nor a poison entry", c.pending())
			}
		})
	}
}

func TestBusiestSKUAndItsTopWorkersShare(t *testing.T) {
	sum := &Summary{SKUs: map[string]*SKUSummary{
		"cold": {DecidedBy: map[string]int{"w0": 2}},
		"hot":  {DecidedBy: map[string]int{"w0": 6, "w1": 4}},
	}}
	if got := sum.Busiest().BusiestShare(); got != 0.6 {
		t.Fatalf("busiest SKU's top worker share %v, want 0.6 (hot: w0 decided 6 of 10)", got)
	}
	if got := (&Summary{}).Busiest().BusiestShare(); got != 0 {
		t.Fatalf("share %v with nothing decided, want 0", got)
	}
}
