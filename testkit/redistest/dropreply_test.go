package redistest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestADroppedReplyIsResentByGoRedisAndRunsTwice(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	defer rdb.Close()
	ctx := context.Background()

	proxy.DropReplyTo("dropped-counter", 1)
	if n, err := rdb.Incr(ctx, "dropped-counter").Result(); err != nil || n != 2 {
		t.Fatalf("INCR through a dropped reply = %d, %v; want 2 (run, reply lost, resent, run again)", n, err)
	}
	if got := proxy.Dropped(); got != 1 {
		t.Fatalf("dropped %d replies, want 1", got)
	}
	if n, err := rdb.Incr(ctx, "dropped-counter").Result(); err != nil || n != 3 {
		t.Fatalf("INCR after the drop = %d, %v; want 3 with no more drops", n, err)
	}
}

func TestADroppedReplyWithoutRetriesIsAnError(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()

	proxy.DropReplyTo("once-counter", 1)
	if err := rdb.Incr(ctx, "once-counter").Err(); err == nil {
		t.Fatal("INCR whose reply was dropped succeeded without retries")
	}
	if n, err := srv.Client().Get(ctx, "once-counter").Int(); err != nil || n != 1 {
		t.Fatalf("counter = %d, %v; want 1: the command ran although its reply was lost", n, err)
	}
}
