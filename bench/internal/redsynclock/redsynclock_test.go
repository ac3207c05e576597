package redsynclock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/stockflow/stockflow/bench/internal/redsynclock"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestLeaseExcludesUntilReleased(t *testing.T) {
	ctx := context.Background()
	l := redsynclock.New(redsync.New(goredis.NewPool(redistest.Start(t).Client())), redsync.WithTries(1))
	lease, err := l.Acquire(ctx, "SKU-1")
	if err != nil {
		t.Fatal(err)
	}
	if lease.Key() != "SKU-1" || lease.Token() != 0 {
		t.Errorf("key %q token %d, want SKU-1 and 0 (unfenced)", lease.Key(), lease.Token())
	}
	if _, err := l.TryAcquire(ctx, "SKU-1"); !errors.Is(err, rlock.ErrNotObtained) {
		t.Fatalf("second holder: got %v, want ErrNotObtained", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if lease.Context().Err() == nil {
		t.Error("the lease context is still live after Release")
	}
	if err := lease.Release(ctx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("second release: got %v, want ErrNotHeld", err)
	}
	again, err := l.TryAcquire(ctx, "SKU-1")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = again.Release(ctx)
}
