package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/stream"
)

// placedOrder is what the producer remembers of an order it published.
type placedOrder struct {
	sku      string
	quantity int64
	placedAt time.Time
}

// publish publishes the run's orders through Watermill, from several goroutines unless a rate is set, and
// returns the orders it placed, by id.
func (r *run) publish(ctx context.Context) (map[string]placedOrder, error) {
	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: keepOpen{r.cfg.Replicas.Publishing(r.rdb)}}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	defer wpub.Close()
	p := &publisher{
		cfg:    r.cfg,
		parts:  r.parts,
		skus:   r.skus,
		pub:    stream.Publisher{Publisher: wpub, Server: stream.ServerAttributes(r.rdb)}, // a trace per order, to the workers
		bar:    newBar(r.progress, "published", r.cfg.Orders),
		placed: make(map[string]placedOrder, r.cfg.Orders),
	}
	defer p.bar.done()
	goroutines := 8
	if r.cfg.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.Rate))
		defer t.Stop()
		p.tick, goroutines = t.C, 1
	}
	return p.placed, p.run(ctx, goroutines)
}

// publisher publishes the orders of one run, numbered 1 .. Orders, from any number of goroutines.
type publisher struct {
	cfg   Config
	parts []stream.Partition
	skus  []string
	pub   message.Publisher
	tick  <-chan time.Time // with a rate: an order a tick
	bar   *bar
	next  atomic.Int64 // the number of the last order taken

	mu     sync.Mutex
	placed map[string]placedOrder
}

// run publishes from n goroutines, each with its own random source, and returns the first error.
func (p *publisher) run(ctx context.Context, n int) error {
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		pick := p.cfg.picker(len(p.skus), rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i))))
		wg.Go(func() {
			if err := p.publishOrders(ctx, pick); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// publishOrders takes the next order number and publishes that order, until all are taken or one fails.
func (p *publisher) publishOrders(ctx context.Context, pick func() int) error {
	for i := p.next.Add(1); i <= int64(p.cfg.Orders); i = p.next.Add(1) {
		if err := p.awaitTick(ctx); err != nil {
			return err
		}
		if err := p.place(ctx, i, p.skus[pick()]); err != nil {
			return err
		}
	}
	return nil
}

// awaitTick waits for the next tick when a rate is set.
func (p *publisher) awaitTick(ctx context.Context) error {
	if p.tick == nil {
		return nil
	}
	select {
	case <-p.tick:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// place publishes order number i, for sku, and remembers it.
func (p *publisher) place(ctx context.Context, i int64, sku string) error {
	o := handlers.Order{OrderID: p.cfg.RunID + "-" + strconv.FormatInt(i, 10), SKU: sku,
		Quantity: int64(p.cfg.Quantity), PlacedAt: time.Now().UTC()}
	payload, _ := json.Marshal(o)
	if err := p.send(ctx, p.parts[p.cfg.PartitionOf(sku)].Orders, payload); err != nil {
		return fmt.Errorf("publish order %s: %w", o.OrderID, err)
	}
	p.mu.Lock()
	p.placed[o.OrderID] = placedOrder{sku: o.SKU, quantity: o.Quantity, placedAt: o.PlacedAt}
	p.mu.Unlock()
	p.bar.add(1)
	return nil
}

// send publishes one order to the orders stream topic, retrying through a Redis restart (or failover) for
// up to half a minute. A retry after a lost reply may publish the order twice; the workers decide it once
// all the same.
func (p *publisher) send(ctx context.Context, topic string, payload []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.SetContext(ctx)
		err := p.pub.Publish(topic, msg)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

// keepOpen keeps the run's client open when the Watermill publisher closes.
type keepOpen struct{ redis.UniversalClient }

func (keepOpen) Close() error { return nil }
