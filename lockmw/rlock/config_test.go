package rlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/testing/redistest"
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
		{"every field set", Config{Lease: time.Second, MaxWait: time.Second, NodeTimeout: time.Second, TokenTTL: time.Hour}, true},
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
