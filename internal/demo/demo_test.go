package demo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestRunOnTheRedisOfRedisURL(t *testing.T) {
	s := redistest.Start(t)
	cfg := Config{RedisURL: s.URL(), Redis: "auto", Workers: 2, Concurrency: 4, Orders: 300, SKUs: 5, Stock: 20,
		Distribution: "hot", Timeout: time.Minute}
	var out strings.Builder
	if err := Run(context.Background(), cfg, &out, nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	head := fmt.Sprintf("Redis: %s (from REDIS_URL)\n2 workers x 4 orders in flight; publishing 300 orders over 5 SKUs (hot), 20 in stock each\ndone in ", s.URL())
	if got := out.String(); !strings.HasPrefix(got, head) || !strings.Contains(got, "run r") ||
		!strings.Contains(got, ": 300 orders published\n") || !strings.HasSuffix(got, "consistency check: PASS\n") {
		t.Errorf("printed\n%s\nwant it to start with\n%s\nand end with the summary of 300 orders that passes", got, head)
	}
	// 300 orders of 1 over 5 SKUs of 20, half of them on SKU-0: SKU-0 sells out.
	store := inventory.New(s.Client())
	for i := range 5 {
		st, err := store.Get(context.Background(), fmt.Sprint("SKU-", i))
		if err != nil || st.Available+st.Reserved != 20 || i == 0 && st.Reserved != 20 {
			t.Errorf("SKU-%d: %+v (%v), want the 20 seeded, all reserved on SKU-0", i, st, err)
		}
	}
}

func TestRunOnEmbeddedRedisRunsEachOrderOnceAndPasses(t *testing.T) {
	// Baskets over a hot SKU, cancelled and fulfilled: lock waits and refused lifecycle events hand orders
	// back for a retry, which every consumer's claim round then sees.
	cfg := Config{Redis: "embedded", Workers: 2, Concurrency: 8, Orders: 400, SKUs: 5, Stock: 40, Distribution: "hot",
		Lines: "1-3", Cancel: 0.1, Fulfil: 0.2, Timeout: time.Minute}
	var out strings.Builder
	if err := Run(context.Background(), cfg, &out, nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "Redis: embedded in-process miniredis at redis://127.0.0.1:") ||
		!strings.HasSuffix(got, "consistency check: PASS\n") {
		t.Errorf("printed\n%s\nwant a run on miniredis that passes", got)
	}
	if !strings.Contains(got, " 0 poisoned, 0 missing, 0 duplicate outcomes\n") {
		t.Errorf("printed\n%s\nwant no order poisoned and no outcome twice: each order is claimed by one consumer", got)
	}
}

func TestRunRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no workers", Config{Workers: 0, Concurrency: 1}, "--workers and --concurrency must be at least 1"},
		{"no consumers", Config{Workers: 1, Concurrency: 0}, "--workers and --concurrency must be at least 1"},
		{"an unknown kind of Redis", Config{Workers: 1, Concurrency: 1, Redis: "cluster"}, `invalid --redis "cluster": want auto, server or embedded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if err := Run(context.Background(), tc.cfg, &out, nil); err == nil || err.Error() != tc.want {
				t.Errorf("Run = %v, want %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}
