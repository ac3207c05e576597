package demo

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// redises are the Redis servers the embedded one must behave like, and the embedded one.
func redises(t *testing.T) map[string]string {
	t.Helper()
	url, stop, err := startEmbedded(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return map[string]string{"redis-server": redistest.Start(t).URL(), "the embedded Redis": url}
}

func TestXClaimClaimsOnlyTheEntriesIdleForItsMinIdleTime(t *testing.T) {
	for name, url := range redises(t) {
		t.Run(name, func(t *testing.T) {
			if err := checkClaims(context.Background(), url); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestMiniredisAsItComesClaimsEntriesNotIdleForTheMinIdleTime(t *testing.T) {
	m := miniredis.RunT(t)
	if err := checkClaims(context.Background(), "redis://"+m.Addr()); !errors.Is(err, errClaims) {
		t.Errorf("checkClaims = %v, want %v: if miniredis honours XCLAIM's min-idle-time now, embedded.claim can go", err, errClaims)
	}
}

func TestBlockingXReadReturnsAnEntryAddedWhileItWaitsAndNothingAfterItsBlockTime(t *testing.T) {
	ctx := context.Background()
	for name, url := range redises(t) {
		t.Run(name, func(t *testing.T) {
			opts, _ := redis.ParseURL(url)
			opts.ContextTimeoutEnabled = true // a read that never returns fails at its ctx's deadline
			rdb := redis.NewClient(opts)
			defer rdb.Close()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"n", "1"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"other", "s", "0-0", id}, Block: 200 * time.Millisecond}).Result()
			if !errors.Is(err, redis.Nil) || time.Since(start) < 200*time.Millisecond {
				t.Errorf("read after the last entry = %v, %v after %v; want nil after the block time", got, err, time.Since(start))
			}
			read := make(chan []redis.XStream, 1)
			go func() { // blocks for an hour, but is given 10 s to return the entry added
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				got, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"other", "s", "0-0", id}, Block: time.Hour}).Result()
				if err != nil {
					t.Error(err)
				}
				read <- got
			}()
			time.Sleep(100 * time.Millisecond)
			added := redis.NewClient(opts)
			defer added.Close()
			next, err := added.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"n", "2"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			got = <-read
			if len(got) != 1 || got[0].Stream != "s" || len(got[0].Messages) != 1 || got[0].Messages[0].ID != next {
				t.Errorf("read while entry %s was added = %v, want that entry", next, got)
			}
		})
	}
}
