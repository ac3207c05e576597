package lockmw

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func TestMiddleware(t *testing.T) {
	s := redistest.Start(t)
	l, err := rlock.NewReentrant(s.Client(), rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	mw := &Middleware{Locker: l, Key: func(msg *message.Message) (string, error) { return string(msg.Payload), nil }}
	ctx := context.Background()
	held := func() int64 {
		st, err := l.Inspect(ctx, "sku-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.Holds
	}

	t.Run("the handler runs under the lease, with a reentrant owner", func(t *testing.T) {
		h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			lease, ok := LeaseFrom(msg.Context())
			if !ok || lease.Token() == 0 || held() != 1 {
				t.Errorf("in the handler: lease %v, holds %d; want a lease with a token, held once", lease, held())
			}
			inner, err := l.TryAcquire(msg.Context(), "sku-1") // nested: same owner re-enters
			if err != nil {
				t.Errorf("nested acquire in the handler: %v", err)
				return nil, nil
			}
			_ = inner.Release(ctx)
			return nil, nil
		})
		if _, err := h(message.NewMessage("m1", []byte("sku-1"))); err != nil {
			t.Fatal(err)
		}
		if held() != 0 {
			t.Fatal("lock still held after the handler")
		}
	})

	t.Run("the lock is released when the handler fails or panics", func(t *testing.T) {
		failing := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("boom") })
		if _, err := failing(message.NewMessage("m2", []byte("sku-1"))); err == nil || err.Error() != "boom" {
			t.Fatalf("err %v, want the handler's", err)
		}
		if held() != 0 {
			t.Fatal("lock held after a failing handler")
		}
		panicking := mw.Middleware(func(*message.Message) ([]*message.Message, error) { panic("boom") })
		func() {
			defer func() { _ = recover() }()
			_, _ = panicking(message.NewMessage("m3", []byte("sku-1")))
		}()
		if held() != 0 {
			t.Fatal("lock held after a panicking handler")
		}
	})

	t.Run("two deliveries of one message exclude each other", func(t *testing.T) {
		var inside, overlaps atomic.Int32
		h := mw.Middleware(func(*message.Message) ([]*message.Message, error) {
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			return nil, nil
		})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := h(message.NewMessage("same-id", []byte("sku-1"))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if overlaps.Load() > 0 {
			t.Fatal("deliveries of the same message ran inside the lock together")
		}
	})

	t.Run("the message context is restored after the handler", func(t *testing.T) {
		msg := message.NewMessage("m4", []byte("sku-1"))
		orig := msg.Context()
		h := mw.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
		_, _ = h(msg)
		if msg.Context() != orig {
			t.Fatal("the message keeps the released lease's context: a retry would start cancelled")
		}
	})
}

// With Keys, a message of several keys runs with all their locks held by its owner (in Redis) and releases
// them all after; when one of them is held elsewhere the handler does not run, the error wraps
// ErrNotObtained after about Wait, and the key taken before it is free again.
func TestMiddlewareWithSeveralKeys(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	l, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	split := func(msg *message.Message) ([]string, error) { return strings.Split(string(msg.Payload), ","), nil }
	mw := &Middleware{Locker: l, Keys: split, Wait: 300 * time.Millisecond}
	ctx := context.Background()
	ran := false
	h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		ran = true
		owner := rlock.OwnerFrom(msg.Context())
		for _, lock := range []string{"lock:{a}", "lock:{b}"} {
			if owner == "" || !rdb.HExists(ctx, lock, owner).Val() {
				t.Errorf("in the handler: %s not held by the run's owner %q", lock, owner)
			}
		}
		ml, ok := MultiLeaseFrom(msg.Context())
		leases := LeasesFrom(msg.Context())
		if !ok || len(leases) != 2 || leases[0].Key() != "a" || leases[1].Token() != ml.Token("b") {
			t.Errorf("in the handler: MultiLease %v, leases %v; want a and b", ok, leases)
		}
		return nil, nil
	})
	if _, err := h(message.NewMessage("m1", []byte("b,a"))); err != nil || !ran {
		t.Fatalf("err %v, ran %v", err, ran)
	}
	if n := rdb.Exists(ctx, "lock:{a}", "lock:{b}").Val(); n != 0 {
		t.Fatalf("%d locks held after the handler", n)
	}

	other, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	lease, err := other.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	ran = false
	msg := message.NewMessage("m2", []byte("a,b"))
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a wait not bounded by Wait fails, not hangs
	defer cancel()
	msg.SetContext(mctx)
	start := time.Now()
	_, err = h(msg)
	if !errors.Is(err, rlock.ErrNotObtained) || !strings.Contains(err.Error(), "lock b of 2 keys") || ran {
		t.Fatalf("err %v, ran %v; want ErrNotObtained naming b, and no run", err, ran)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, want about Wait (300ms)", took)
	}
	a, err := other.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("a not free after the set failed: %v", err)
	}
	_ = a.Release(ctx)
}

// Keys of one key takes the path of Key: the handler finds a single lease, and LeasesFrom finds it too.
func TestMiddlewareWithOneOfKeys(t *testing.T) {
	s := redistest.Start(t)
	l, err := rlock.NewReentrant(s.Client(), rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	one := func(msg *message.Message) ([]string, error) { return []string{string(msg.Payload)}, nil }
	h := (&Middleware{Locker: l, Keys: one}).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		lease, single := LeaseFrom(msg.Context())
		_, multi := MultiLeaseFrom(msg.Context())
		if leases := LeasesFrom(msg.Context()); !single || multi || len(leases) != 1 || leases[0] != lease {
			t.Errorf("lease %v, MultiLease %v, leases %v; want one lease", single, multi, leases)
		}
		return nil, nil
	})
	if _, err := h(message.NewMessage("m1", []byte("a"))); err != nil {
		t.Fatal(err)
	}
	if LeasesFrom(context.Background()) != nil {
		t.Fatal("leases outside the middleware")
	}
}

// Without Key or Keys, a message must carry its keys (WithKeys); one that does not fails, its handler not run.
func TestAMessageWithoutKeysFails(t *testing.T) {
	ran := false
	h := (&Middleware{Locker: noLocker{}}).Middleware(func(*message.Message) ([]*message.Message, error) {
		ran = true
		return nil, nil
	})
	if _, err := h(message.NewMessage("u-1", nil)); err == nil || !strings.Contains(err.Error(), "no lock keys") || ran {
		t.Fatalf("a message without keys: %v (handler ran: %v), want an error naming the missing keys", err, ran)
	}
}

// noLocker is a Locker that is never called.
type noLocker struct{ rlock.Locker }

// failingRelease wraps a locker whose leases of key fail to release with err (after releasing).
type failingRelease struct {
	rlock.Locker
	key string
	err error
}

func (f failingRelease) Acquire(ctx context.Context, key string) (rlock.Lease, error) {
	lease, err := f.Locker.Acquire(ctx, key)
	if err != nil || key != f.key {
		return lease, err
	}
	return failingLease{lease, f.err}, nil
}

type failingLease struct {
	rlock.Lease
	err error
}

func (l failingLease) Release(ctx context.Context) error {
	_ = l.Lease.Release(ctx)
	return l.err
}

// A set whose one lock was lost (no error: it expired or was taken) and another's release failed reports
// the failure: the lost one does not hide it.
func TestMiddlewareReportsAReleaseFailureBesideALostLock(t *testing.T) {
	rdb := redistest.Start(t).Client()
	l, err := rlock.NewReentrant(rdb, rlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	down := errors.New("connection reset")
	split := func(msg *message.Message) ([]string, error) { return strings.Split(string(msg.Payload), ","), nil }
	mw := &Middleware{Locker: failingRelease{l, "b", down}, Keys: split}
	h := mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		rdb.Del(context.Background(), "lock:{a}") // a is lost
		return nil, nil
	})
	if _, err := h(message.NewMessage("m1", []byte("a,b"))); !errors.Is(err, down) {
		t.Fatalf("err %v, want b's release failure", err)
	}
	if _, err := h(message.NewMessage("m2", []byte("a,c"))); err != nil {
		t.Fatalf("err %v, want none: a lost lock alone is no error", err)
	}
}
