package producer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/order"
)

// collector reads this run's outcome and poison events into its Summary.
type collector struct {
	cfg    Config
	parts  []order.Partition
	sum    *Summary
	placed map[eventKey]placedOrder
	from   []outcomeCursor // by partition
	bar    *bar

	// seen is the outcome of each event: its first, but for a cancel or fulfil first refused and then,
	// redelivered, done.
	seen        map[eventKey]order.Result
	poisoned    map[eventKey]bool
	latencies   []time.Duration // from placed to processed, an event each
	waits       []float64       // lock wait in milliseconds, an event each
	first, last time.Time       // the first event placed and the last one processed
}

// newCollector returns a collector of the outcomes of the placed events into sum.
func newCollector(cfg Config, sum *Summary, placed map[eventKey]placedOrder, progress *bar) *collector {
	return &collector{cfg: cfg, parts: cfg.Partitions(), sum: sum, placed: placed, bar: progress,
		seen: make(map[eventKey]order.Result, len(placed)), poisoned: map[eventKey]bool{}}
}

// collect reads events until every event placed has an outcome, then computes the throughput and
// percentiles. When the Timeout passes first, it counts the events left without one as missing, for check
// to report, and computes no figures. Either way it settles the orders' final states.
func (c *collector) collect(ctx context.Context, rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	defer c.bar.done()
	events := make(chan []redis.XStream)
	var wg sync.WaitGroup
	defer func() {
		cancel() // the readers stop
		wg.Wait()
	}()
	for i, p := range c.parts {
		wg.Go(func() { c.follow(ctx, rdb, p, &c.from[i], events) })
	}
	for c.pending() > 0 {
		select {
		case <-ctx.Done():
			c.sum.Missing = c.pending()
			c.settle()
			return
		case streams := <-events:
			c.add(streams)
		}
	}
	c.finish()
	c.settle()
}

// follow reads partition p's outcome and poison events after cursor into events until ctx ends, moving the
// cursor past them. It keeps trying through a Redis restart or failover.
func (c *collector) follow(ctx context.Context, rdb redis.UniversalClient, p order.Partition, cursor *outcomeCursor, events chan<- []redis.XStream) {
	for ctx.Err() == nil {
		streams, err := rdb.XRead(ctx, &redis.XReadArgs{
			Streams: []string{p.Results, p.Poison, cursor.results, cursor.poison},
			Count:   1000, Block: 500 * time.Millisecond,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil): // nothing new within the block time
		case err != nil:
			sleep(ctx, 200*time.Millisecond)
		default:
			for _, s := range streams {
				last := s.Messages[len(s.Messages)-1].ID
				if s.Stream == p.Poison {
					cursor.poison = last
				} else {
					cursor.results = last
				}
			}
			select {
			case events <- streams:
			case <-ctx.Done():
			}
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// pending is the number of events with neither an outcome nor a poison entry yet. An event can have both
// (poisoned by one consumer while another ran it): it counts once.
func (c *collector) pending() int {
	n := len(c.placed) - len(c.seen)
	for k := range c.poisoned {
		if _, decided := c.seen[k]; !decided {
			n--
		}
	}
	return n
}

// add takes the events read.
func (c *collector) add(streams []redis.XStream) {
	for _, s := range streams {
		poison := slices.ContainsFunc(c.parts, func(p order.Partition) bool { return p.Poison == s.Stream })
		for _, e := range s.Messages {
			payload, _ := e.Values["payload"].(string)
			if poison {
				c.addPoison(payload)
			} else {
				c.addResult(payload)
			}
		}
	}
}

// addPoison counts a poison entry when it is one of this run's events, once.
func (c *collector) addPoison(payload string) {
	var o order.Order
	if json.Unmarshal([]byte(payload), &o) != nil {
		return
	}
	if _, ours := c.placed[keyOf(o)]; ours && !c.poisoned[keyOf(o)] {
		c.poisoned[keyOf(o)] = true
		c.sum.Poisoned++
		c.bar.add(1)
	}
}

// addResult takes an outcome event of this run: the first of its event, or a further one. Each is checked
// on its own as it comes.
func (c *collector) addResult(payload string) {
	var r order.Result
	if json.Unmarshal([]byte(payload), &r) != nil {
		return
	}
	k := eventKey{cmp.Or(r.Type, order.TypeReserve), r.OrderID}
	p, ours := c.placed[k]
	if !ours {
		return
	}
	c.sum.Problems = append(c.sum.Problems, outcomeProblems(k, r, c.orderOf(k).lines)...)
	if first, dup := c.seen[k]; dup {
		c.again(k, first, r)
		return
	}
	c.seen[k] = r
	c.bar.add(1)
	c.timing(p, r)
	c.sum.tally(k, r, c.orderOf(k).lines)
}

// orderOf is the reservation of event k's order.
func (c *collector) orderOf(k eventKey) placedOrder {
	return c.placed[eventKey{order.TypeReserve, k.orderID}]
}

// timing records how long an event took and waited for its locks.
func (c *collector) timing(p placedOrder, r order.Result) {
	c.latencies = append(c.latencies, r.ProcessedAt.Sub(p.placedAt))
	c.waits = append(c.waits, r.LockWaitMs)
	if c.first.IsZero() || p.placedAt.Before(c.first) {
		c.first = p.placedAt
	}
	if r.ProcessedAt.After(c.last) {
		c.last = r.ProcessedAt
	}
}

// tally counts the first outcome of an event: a reservation's is reserved (or, replayed, since cancelled
// or fulfilled) or rejected; and the SKUs of its order had it decided.
func (s *Summary) tally(k eventKey, r order.Result, lines []order.Line) {
	for _, l := range lines {
		if sku := s.SKUs[l.SKU]; sku != nil {
			sku.decided(r)
		}
	}
	switch {
	case k.kind != order.TypeReserve:
	case r.Status == order.StatusRejected:
		s.Rejected++
	case reservedOnce(r.Status):
		s.Reserved++
	}
}

// decided counts an event of the SKU decided by r's worker after r's wait for the locks.
func (k *SKUSummary) decided(r order.Result) {
	k.LockWaitMs += r.LockWaitMs
	if k.DecidedBy == nil {
		k.DecidedBy = map[string]int{}
	}
	k.DecidedBy[r.Worker]++
}

// again takes a further outcome of an event, a duplicate. One that contradicts the first is a problem. A
// redelivered reservation may replay its order as since cancelled or fulfilled, and a cancel or fulfil
// refused (its order not decided yet) may be done by its redelivery: either is then the event's outcome.
func (c *collector) again(k eventKey, first, r order.Result) {
	c.sum.Duplicates++
	keep, contradicts := againLifecycle(first.Status, r.Status)
	if k.kind == order.TypeReserve {
		contradicts = !sameReservation(first.Status, r.Status)
		keep = !contradicts && r.Status != order.StatusReserved
	}
	if keep {
		c.seen[k] = r
	}
	if contradicts {
		c.sum.Problems = append(c.sum.Problems, fmt.Sprintf("%s has outcomes %s and %s", k, first.Status, r.Status))
	}
}

// againLifecycle judges a further outcome of a cancel or fulfil: done after it was refused is kept, refused
// after it was done contradicts it.
func againLifecycle(first, again order.Status) (keep, contradicts bool) {
	refused, now := first == order.StatusRejected, again == order.StatusRejected
	return refused && !now, !refused && now
}

// finish computes the throughput and the percentiles once every event has an outcome.
func (c *collector) finish() {
	if span := c.last.Sub(c.first).Seconds(); span > 0 {
		c.sum.Throughput = float64(len(c.seen)) / span
	}
	slices.Sort(c.latencies)
	c.sum.LatencyP50, c.sum.LatencyP99 = percentile(c.latencies, 0.50), percentile(c.latencies, 0.99)
	c.sum.LockWait = lockWait(c.waits, c.sum.SKUs)
}

// lockWait summarises the lock waits of the orders (sorted in place) and of the SKUs.
func lockWait(waits []float64, skus map[string]*SKUSummary) LockWait {
	slices.Sort(waits)
	lw := LockWait{P50: percentile(waits, 0.50), P95: percentile(waits, 0.95), P99: percentile(waits, 0.99),
		HotSKUs: hotSKUs(skus, 5)}
	if len(waits) > 0 {
		lw.Max = waits[len(waits)-1]
	}
	return lw
}

// hotSKUs lists the n SKUs with the most total lock wait, most first; ties by name. SKUs that never waited
// are left out.
func hotSKUs(skus map[string]*SKUSummary, n int) []string {
	var hot []string
	for sku, s := range skus {
		if s.LockWaitMs > 0 {
			hot = append(hot, sku)
		}
	}
	slices.SortFunc(hot, func(a, b string) int {
		return cmp.Or(cmp.Compare(skus[b].LockWaitMs, skus[a].LockWaitMs), strings.Compare(a, b))
	})
	return hot[:min(n, len(hot))]
}

// percentile is the p-th (0..1) value of sorted, rounding the rank down; the zero value when it is empty.
func percentile[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}
