// Package producer publishes order events for stockflow workers and, when asked, waits for their outcomes
// and checks that the stock adds up.
package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/telemetry"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/inventory"
)

// Config is the producer's configuration.
type Config struct {
	worker.Streams
	Orders       int
	SKUs         int
	SKUList      string
	Quantity     int
	Distribution string
	Rate         float64 // orders per second, 0: as fast as possible
	SeedStock    int     // < 0: leave the stock as it is
	Wait         bool
	Timeout      time.Duration
	JSON         bool
	RunID        string
}

// Flags defines the producer's settings on s.
func Flags(s *config.Set, c *Config) {
	worker.StreamFlags(s, &c.Streams)
	s.Int(&c.Orders, "orders", 1000, "orders to publish")
	s.Int(&c.SKUs, "skus", 10, "number of SKUs, named SKU-0 .. SKU-<n-1>")
	s.String(&c.SKUList, "sku-list", "", "comma-separated SKUs to use instead of --skus")
	s.Int(&c.Quantity, "quantity", 1, "quantity of each order")
	s.String(&c.Distribution, "distribution", "uniform", "how orders spread over SKUs: uniform, zipf, or hot (half on the first SKU)")
	s.Float(&c.Rate, "rate", 0, "orders per second (0: as fast as possible)")
	s.Int(&c.SeedStock, "seed-stock", -1, "set each SKU's available stock to this first (-1: leave it)")
	s.Bool(&c.Wait, "wait", "wait for every outcome, print a summary and check consistency")
	s.Duration(&c.Timeout, "wait-timeout", 2*time.Minute, "with --wait: how long to wait for the outcomes")
	s.Bool(&c.JSON, "json", "print the summary as JSON")
	s.String(&c.RunID, "run-id", "", "prefix of the order ids (default: random)")
}

// Validate reports the first bad setting, by name.
func (c *Config) Validate() error {
	if c.Orders < 1 {
		return fmt.Errorf("invalid --orders %d: want at least 1", c.Orders)
	}
	if c.SKUList == "" && c.SKUs < 1 {
		return fmt.Errorf("invalid --skus %d: want at least 1", c.SKUs)
	}
	for _, sku := range c.skus() {
		if err := inventory.ValidateSKU(sku); err != nil {
			return fmt.Errorf("invalid --sku-list: %w", err)
		}
	}
	if err := inventory.ValidateQuantity(int64(c.Quantity)); err != nil {
		return fmt.Errorf("invalid --quantity: %w", err)
	}
	switch c.Distribution {
	case "uniform", "zipf", "hot":
	default:
		return fmt.Errorf("invalid --distribution %q: want uniform, zipf or hot", c.Distribution)
	}
	if _, err := config.RedisOptions(c.RedisURL); err != nil {
		return fmt.Errorf("invalid REDIS_URL: %w", err)
	}
	if c.RunID == "" {
		c.RunID = "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if err := inventory.ValidateOrderID(c.RunID + "-" + strconv.Itoa(c.Orders)); err != nil {
		return fmt.Errorf("invalid --run-id: %w", err)
	}
	return nil
}

func (c *Config) skus() []string {
	if c.SKUList != "" {
		return strings.Split(c.SKUList, ",")
	}
	out := make([]string, c.SKUs)
	for i := range out {
		out[i] = "SKU-" + strconv.Itoa(i)
	}
	return out
}

// picker returns a function choosing the SKU index of each order, with its own random source.
func (c *Config) picker(n int, r *rand.Rand) func() int {
	switch c.Distribution {
	case "zipf":
		// s = 1.1: a few SKUs get most orders, as best sellers do.
		z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	case "hot":
		return func() int {
			if r.IntN(2) == 0 {
				return 0
			}
			return r.IntN(n)
		}
	}
	return func() int { return r.IntN(n) }
}

// Run seeds, publishes and (with Wait) waits and checks. Progress goes to progress (nil: none).
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts, _ := config.RedisOptions(cfg.RedisURL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	store := inventory.New(rdb)
	skus := cfg.skus()

	if cfg.SeedStock >= 0 {
		for _, sku := range skus {
			if err := store.SetStock(ctx, sku, int64(cfg.SeedStock)); err != nil {
				return nil, fmt.Errorf("seed stock: %w", err)
			}
		}
	}
	sum := &Summary{RunID: cfg.RunID, Orders: cfg.Orders, SKUs: map[string]*SKUSummary{}}
	for _, sku := range skus {
		st, err := store.Get(ctx, sku)
		if err != nil && !errors.Is(err, inventory.ErrUnknownSKU) {
			return nil, err
		}
		sum.SKUs[sku] = &SKUSummary{Initial: st.Available + st.Reserved, reservedBefore: st.Reserved}
	}
	// Outcomes of this run can only come after these entries.
	resultsFrom, err := lastID(ctx, rdb, cfg.ResultsStream)
	if err != nil {
		return nil, err
	}
	poisonFrom, err := lastID(ctx, rdb, cfg.PoisonStream)
	if err != nil {
		return nil, err
	}

	if err := ensureGroup(ctx, rdb, cfg.Streams); err != nil {
		return nil, err
	}
	placed, err := publish(ctx, cfg, rdb, skus, progress)
	if err != nil {
		return nil, err
	}
	sum.Published = len(placed)
	if !cfg.Wait {
		return sum, nil
	}
	if err := collect(ctx, cfg, rdb, sum, placed, resultsFrom, poisonFrom, progress); err != nil {
		return sum, err
	}
	for sku, s := range sum.SKUs {
		st, err := store.Get(ctx, sku)
		if err != nil && !errors.Is(err, inventory.ErrUnknownSKU) {
			return sum, err
		}
		s.Available, s.Reserved = st.Available, st.Reserved
	}
	sum.check()
	return sum, nil
}

// ensureGroup creates the workers' consumer group at the end of an empty (or missing) stream, so that the
// orders about to be published reach workers that start later (a new group starts at $ by default and
// would skip them). A stream that already holds entries is left to the workers: they decide by
// CONSUMER_GROUP_START whether those entries are processed.
func ensureGroup(ctx context.Context, rdb *redis.Client, s worker.Streams) error {
	n, err := rdb.XLen(ctx, s.OrdersStream).Result()
	if err != nil || n > 0 {
		return err
	}
	err = rdb.XGroupCreateMkStream(ctx, s.OrdersStream, s.ConsumerGroup, "$").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create consumer group %s of stream %s: %w", s.ConsumerGroup, s.OrdersStream, err)
	}
	return nil
}

// lastID is the ID of the newest entry of a stream, "0-0" when it has none.
func lastID(ctx context.Context, rdb *redis.Client, stream string) (string, error) {
	last, err := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("read %s: %w", stream, err)
	}
	if len(last) == 0 {
		return "0-0", nil
	}
	return last[0].ID, nil
}

// placedOrder is what the producer remembers of an order it published.
type placedOrder struct {
	sku      string
	quantity int64
	placedAt time.Time
}

// publish publishes the orders through Watermill, from several goroutines unless a rate is set.
func publish(ctx context.Context, cfg Config, rdb *redis.Client, skus []string, progress io.Writer) (map[string]placedOrder, error) {
	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: keepOpen{rdb}}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	defer wpub.Close()
	pub := telemetry.Publisher{Publisher: wpub} // a trace per order, carried to the workers in the metadata
	placed := make(map[string]placedOrder, cfg.Orders)
	var mu sync.Mutex
	var next atomic.Int64
	bar := newBar(progress, "published", cfg.Orders)
	defer bar.done()
	var tick <-chan time.Time
	workers := 8
	if cfg.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
		defer t.Stop()
		tick, workers = t.C, 1
	}
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		pick := cfg.picker(len(skus), rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w))))
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(cfg.Orders) {
					return
				}
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						errc <- ctx.Err()
						return
					}
				}
				o := handlers.Order{OrderID: cfg.RunID + "-" + strconv.FormatInt(i, 10), SKU: skus[pick()],
					Quantity: int64(cfg.Quantity), PlacedAt: time.Now().UTC()}
				payload, _ := json.Marshal(o)
				if err := publishOne(ctx, pub, cfg.OrdersStream, payload); err != nil {
					errc <- fmt.Errorf("publish order %s: %w", o.OrderID, err)
					return
				}
				mu.Lock()
				placed[o.OrderID] = placedOrder{sku: o.SKU, quantity: o.Quantity, placedAt: o.PlacedAt}
				mu.Unlock()
				bar.add(1)
			}
		})
	}
	wg.Wait()
	close(errc)
	return placed, <-errc
}

// publishOne publishes one order, retrying through a Redis restart for up to half a minute. A retry after a
// lost reply may publish the order twice; the workers decide it once all the same.
func publishOne(ctx context.Context, pub message.Publisher, stream string, payload []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.SetContext(ctx)
		err := pub.Publish(stream, msg)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

type keepOpen struct{ redis.UniversalClient }

func (keepOpen) Close() error { return nil }
