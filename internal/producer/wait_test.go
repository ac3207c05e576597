package producer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/handlers"
	"github.com/stockflow/stockflow/internal/delivery"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
	"github.com/stockflow/stockflow/order"
	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// TestRunWaitsForBasketsAndLifecycleEvents runs baskets with cancels and fulfils against a stand-in
// worker that decides them with the real handlers and stock scripts: decided honestly the stock adds up;
// decided by a store that fulfils what it says it cancelled, the check finds out.
func TestRunWaitsForBasketsAndLifecycleEvents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		store   func(*inventory.Store) handlers.Store
		problem string // one of the problems expected, "" for none
	}{
		{"decided honestly, the stock adds up", func(s *inventory.Store) handlers.Store { return s }, ""},
		{"a store that fulfils the orders it says it cancelled fails the check",
			func(s *inventory.Store) handlers.Store { return cancelsAsFulfils{s} }, "fulfilled grew by"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := DefaultConfig()
			cfg.RedisURL, cfg.RunID, cfg.Orders, cfg.SKUs, cfg.SeedStock = s.URL(), "t", 200, 4, 40
			cfg.Lines, cfg.Cancel, cfg.Fulfil, cfg.Wait, cfg.Timeout = "1-3", 0.3, 0.3, true, 30*time.Second
			done := make(chan struct{})
			store := tc.store(inventory.New(rdb))
			batcher := &lockmw.Batcher{}
			outcomes, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: cfg.ConsumerGroup,
				Consumer: "stand-in"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := handlers.New(handlers.Config{Store: store, Outcomes: outcomes, ResultsTopic: cfg.ResultsStream,
				Worker: "stand-in", Batcher: batcher})
			decoder := &delivery.Decoder{Lines: store}
			decide := decoder.Decode(batcher.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				return nil, h.Handle(msg)
			}))
			go func() { defer close(done); standInWorker(ctx, t, rdb, cfg, decide) }()
			defer func() { cancel(); <-done }()

			sum, err := Run(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Missing != 0 || sum.Outcomes != sum.Published || sum.Baskets != 200 {
				t.Fatalf("%d missing, %d outcomes of %d events, %d baskets: want every event of 200 baskets decided",
					sum.Missing, sum.Outcomes, sum.Published, sum.Baskets)
			}
			// 200 orders of 2 lines on average take 400 of the 160 in stock: some are rejected.
			if sum.Rejected == 0 || sum.Cancelled == 0 || sum.Fulfilled == 0 {
				t.Errorf("%d rejected, %d cancelled, %d fulfilled: want some of each", sum.Rejected, sum.Cancelled, sum.Fulfilled)
			}
			problems := strings.Join(sum.Problems, "\n")
			if tc.problem == "" && !sum.Consistent {
				t.Errorf("the check failed:\n%s", problems)
			}
			if tc.problem != "" && (sum.Consistent || !strings.Contains(problems, tc.problem)) {
				t.Errorf("consistent %v, problems\n%s\nwant one with %q", sum.Consistent, problems, tc.problem)
			}
		})
	}
}

// standInWorker decides the events of the orders stream one at a time, unfenced (no lock), with decide, the
// real decoder and handler, which adds their outcome events to the results stream; it acks them, as the
// router does.
func standInWorker(ctx context.Context, t *testing.T, rdb *redis.Client, cfg Config, decide message.HandlerFunc) {
	for ctx.Err() == nil {
		streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: cfg.ConsumerGroup, Consumer: "stand-in",
			Streams: []string{cfg.OrdersStream, ">"}, Block: 100 * time.Millisecond}).Result()
		if err != nil { // no group yet, or nothing new
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, e := range streams[0].Messages {
			payload, _ := e.Values["payload"].(string)
			msg := redisstream.Entry{ID: e.ID, Stream: cfg.OrdersStream, Deliveries: 1, Values: map[string]any{"payload": payload}}.Message()
			msg.SetContext(ctx)
			if _, err := decide(msg); err != nil {
				t.Errorf("decide %s: %v", payload, err)
				return
			}
			rdb.XAck(ctx, cfg.OrdersStream, cfg.ConsumerGroup, e.ID) // as the router does
		}
	}
}

// cancelsAsFulfils is a broken store: asked to cancel an order it fulfils it, and says it cancelled it.
type cancelsAsFulfils struct{ *inventory.Store }

func (s cancelsAsFulfils) Cancel(ctx context.Context, orderID, sku string, fences inventory.Fences) (inventory.OrderOutcome, error) {
	out, err := s.Fulfil(ctx, orderID, sku, fences)
	if out.Status == order.StatusFulfilled {
		out.Status = order.StatusCancelled
		for i := range out.Lines {
			out.Lines[i].Status = order.StatusCancelled
		}
	}
	return out, err
}
