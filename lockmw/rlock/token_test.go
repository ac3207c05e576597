package rlock

import (
	"context"
	"testing"
	"time"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

func TestTokenTTL(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"by default a counter is kept forever, as Redisson keeps it", 0}, {"with TokenTTL a counter expires", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "ttl-" + tc.ttl.String()
			l := newLocker(t, s, Config{TokenTTL: tc.ttl})
			lease := mustAcquire(t, l, ctx, key)
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			pttl := rdb.PTTL(ctx, namesFor(key).token).Val()
			switch {
			case tc.ttl == 0 && pttl != -1:
				t.Fatalf("counter PTTL %v, want none", pttl)
			case tc.ttl > 0 && (pttl <= tc.ttl-time.Minute || pttl > tc.ttl):
				t.Fatalf("counter PTTL %v, want about %v", pttl, tc.ttl)
			}
		})
	}
}

func TestRaiseToken(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	lockers := map[string]interface {
		Locker
		RaiseToken(context.Context, string, int64) error
	}{
		"reentrant": newLocker(t, servers[0], Config{TokenTTL: time.Hour}),
		"redlock":   newRedlock(t, servers, Config{TokenTTL: time.Hour}),
	}
	for name, l := range lockers {
		t.Run(name, func(t *testing.T) {
			key := "raise-" + name
			take := func() int64 {
				t.Helper()
				lease := mustAcquire(t, l, ctx, key)
				defer lease.Release(ctx)
				return lease.Token()
			}
			// One Redis hands out exactly the next number. Redlock's tokens only increase: an attempt that
			// timed out on a master (a loaded machine) has drawn a number there, and the retry draws the next.
			exact := name == "reentrant"
			if tok := take(); tok != 1 && (exact || tok < 1) {
				t.Fatalf("first token %d, want 1", tok)
			}
			if err := l.RaiseToken(ctx, key, 40); err != nil {
				t.Fatal(err)
			}
			if pttl := servers[0].Client().PTTL(ctx, namesFor(key).token).Val(); pttl <= 0 {
				t.Fatalf("raised counter has PTTL %v, want TokenTTL kept", pttl)
			}
			raised := take()
			if raised != 41 && (exact || raised < 41) {
				t.Fatalf("token after raising to 40: %d, want 41", raised)
			}
			if err := l.RaiseToken(ctx, key, 5); err != nil {
				t.Fatal(err)
			}
			if tok := take(); tok != raised+1 && (exact || tok <= raised) {
				t.Fatalf("token after a raise to a lower value: %d, want %d (never lowered)", tok, raised+1)
			}
		})
	}
}
