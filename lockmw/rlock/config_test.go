package rlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/lockmw/rlock/internal/redistest"
)

// Validate accepts exactly what the constructors accept, the zero Config first of all.
func TestValidateAcceptsWhatTheConstructorsAccept(t *testing.T) {
	servers := redistest.StartN(t, 3)
	clients := []redis.UniversalClient{servers[0].Client(), servers[1].Client(), servers[2].Client()}
	for _, tc := range []struct {
		name  string
		cfg   Config
		valid bool
	}{
		{"the zero Config takes the defaults", Config{}, true},
		{"the shortest lease", Config{Lease: MinLease}, true},
		{"every field set", Config{Lease: time.Second, MaxWait: time.Second, NodeTimeout: time.Second, TokenTTL: time.Hour,
			KeyPrefix: "app:lock:", TelemetryPrefix: "app.lock"}, true},
		{"a key prefix with a brace", Config{KeyPrefix: "{app}:"}, false},
		{"a lease below the minimum", Config{Lease: time.Millisecond}, false},
		{"a negative lease", Config{Lease: -time.Second}, false},
		{"a negative MaxWait", Config{MaxWait: -1}, false},
		{"a negative NodeTimeout", Config{NodeTimeout: -1}, false},
		{"a negative TokenTTL", Config{TokenTTL: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verr := tc.cfg.Validate()
			r, rerr := NewReentrant(clients[0], tc.cfg)
			if rerr == nil {
				_ = r.Close()
			}
			rl, lerr := NewRedlock(clients, tc.cfg)
			if lerr == nil {
				_ = rl.Close()
			}
			if (verr == nil) != tc.valid || (rerr == nil) != tc.valid || (lerr == nil) != tc.valid {
				t.Fatalf("Validate: %v, NewReentrant: %v, NewRedlock: %v; want valid=%v for all", verr, rerr, lerr, tc.valid)
			}
		})
	}
}

// KeyPrefix names a lock's keys and unlock channel: the holder's lock and counter are under it and not in
// the default layout, the same key under the default prefix is another lock, and a waiter under the prefix
// is woken by the release's message on the prefixed channel (not by its fallback retry, 30 s later).
func TestKeyPrefixNamesTheLocksKeysAndChannel(t *testing.T) {
	s := redistest.Start(t)
	cfg := Config{KeyPrefix: "app:lock:"}
	if got := []string{cfg.LockKey("K"), cfg.TokenKey("K"), cfg.ChannelKey("K")}; got[0] != "app:lock:{K}" ||
		got[1] != "redisson_lock_token:app:lock:{K}" || got[2] != "redisson_lock__channel:app:lock:{K}" {
		t.Fatalf("keys under the prefix %q", got)
	}
	ctx, rdb := context.Background(), s.Client()
	holder, waiter := newLocker(t, s, cfg), newLocker(t, s, cfg)
	lease := mustAcquire(t, holder, ctx, "K")
	if n := rdb.Exists(ctx, cfg.LockKey("K"), cfg.TokenKey("K")).Val(); n != 2 {
		t.Fatalf("%d of the prefixed lock and counter exist, want both", n)
	}
	if n := rdb.Exists(ctx, LockKey("K"), TokenKey("K")).Val(); n != 0 {
		t.Fatalf("%d keys in the default layout exist, want none", n)
	}
	other := mustAcquire(t, newLocker(t, s, Config{}), ctx, "K") // the default prefix: another lock
	if err := errors.Join(other.Release(ctx), lease.Release(ctx)); err != nil {
		t.Fatal(err)
	}
	if wait := wakeUp(t, holder, waiter, waiter.e, "K"); wait > wokenWithin {
		t.Errorf("waiter woken %v after the release, want < %v", wait, wokenWithin)
	}
}
