// Command benchconsumer is a peer of the worker for the cost-per-order comparison of the bench harness,
// consuming the orders stream's group "inventory" on --redis-url:
//
//   - --kind watermill: a plain Watermill Router over watermill-redisstream's subscriber (its defaults)
//     whose handler only acks: what Watermill costs per message with nothing decided;
//   - --kind ideal: the minimal consumer that decides as the worker does, written for the bench: XREADGROUP
//     COUNT 100 (blocking when idle), the orders of a read grouped by SKU, one reserve_batch.lua call per
//     SKU batch (inventory.Store.ReserveBatches, no lock) in one pipeline, then every outcome XADD and one
//     XACK in one pipeline. No poison, no claims, no traces, no size limit: a floor, not a product.
//
// Both serve /readyz on --metrics-addr and net/http/pprof on --pprof-addr (as the worker's PPROF_ADDR), and
// stop on SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // the harness reads the allocations from /debug/pprof/heap
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/inventory"
)

const group = "inventory"

func main() {
	kind := flag.String("kind", "ideal", "watermill or ideal")
	url := flag.String("redis-url", "redis://127.0.0.1:6379/0", "the Redis")
	name := flag.String("name", "c0", "the consumer's name in the group")
	addr := flag.String("metrics-addr", "127.0.0.1:0", "serves /readyz")
	pprofAddr := flag.String("pprof-addr", "127.0.0.1:0", "serves /debug/pprof/ (the harness reads the allocations there)")
	flag.Parse()
	opts, err := redis.ParseURL(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(opts)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := rdb.XGroupCreateMkStream(ctx, "orders", group, "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go serve(*addr)
	go func() { _ = http.ListenAndServe(*pprofAddr, nil) }() // net/http/pprof's handlers
	switch *kind {
	case "watermill":
		err = ackOnly(ctx, rdb, *name)
	case "ideal":
		err = ideal(ctx, rdb, *name)
	default:
		err = fmt.Errorf("unknown --kind %q", *kind)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func serve(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) {})
	_ = http.ListenAndServe(addr, mux)
}

// ackOnly runs a Watermill Router whose handler acks every message.
func ackOnly(ctx context.Context, rdb *redis.Client, name string) error {
	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, Consumer: name, ConsumerGroup: group, OldestId: "0"}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	router.AddConsumerHandler("ack", "orders", sub, func(*message.Message) error { return nil })
	return router.Run(ctx)
}

// order is what the ideal consumer reads of an order's payload.
type order struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// ideal reads, decides and publishes in batches until ctx ends.
func ideal(ctx context.Context, rdb *redis.Client, name string) error {
	store := inventory.New(rdb)
	for ctx.Err() == nil {
		streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: name,
			Streams: []string{"orders", ">"}, Count: 100, Block: time.Second}).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return err
		}
		if err := decide(ctx, rdb, store, streams[0].Messages); err != nil {
			return err
		}
	}
	return nil
}

// decide reserves the entries' orders, one batch per SKU, in one pipeline, then publishes their outcomes
// and acks them in another.
func decide(ctx context.Context, rdb *redis.Client, store *inventory.Store, entries []redis.XMessage) error {
	bySKU := map[string]int{}
	var batches []inventory.Batch
	var ids [][]string
	for _, e := range entries {
		var o order
		payload, _ := e.Values["payload"].(string)
		if err := json.Unmarshal([]byte(payload), &o); err != nil {
			return err
		}
		i, ok := bySKU[o.SKU]
		if !ok || len(batches[i].Orders) == inventory.MaxBatch {
			i = len(batches)
			bySKU[o.SKU] = i
			batches = append(batches, inventory.Batch{Ctx: ctx})
			ids = append(ids, nil)
		}
		batches[i].Orders = append(batches[i].Orders, inventory.Order{ID: o.OrderID, SKU: o.SKU, Quantity: o.Quantity})
		ids[i] = append(ids[i], e.ID)
	}
	results := store.ReserveBatches(ctx, batches)
	pipe := rdb.Pipeline()
	var acked []string
	for i, r := range results {
		if r.Err != nil {
			continue // left pending
		}
		for _, out := range r.Outcomes {
			payload, _ := json.Marshal(out)
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "order-results", Values: []any{"payload", payload}})
		}
		acked = append(acked, ids[i]...)
	}
	if len(acked) > 0 {
		pipe.XAck(ctx, "orders", group, acked...)
	}
	_, err := pipe.Exec(ctx)
	return err
}
