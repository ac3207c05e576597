package rlock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultLease is the default Config.Lease.
const DefaultLease = 30 * time.Second

// MinLease is the shortest lease accepted: the watchdog must renew within a third of it.
const MinLease = 10 * time.Millisecond

// DefaultNodeTimeout is the default Config.NodeTimeout.
const DefaultNodeTimeout = 50 * time.Millisecond

// Config configures a locker. The zero value is valid: zero fields take their defaults.
type Config struct {
	// Lease is how long a lock outlives its holder's last renewal. The watchdog renews every Lease/3 while
	// the lock is held, so only a crashed or paused holder lets it expire. At least MinLease. Default
	// DefaultLease (30 s).
	Lease time.Duration
	// MaxWait bounds how long Acquire waits for a lock held by another owner. Default 0: until the
	// context is done.
	MaxWait time.Duration
	// NodeTimeout bounds each Redis call of one Redlock attempt, so a slow or stopped master costs at most
	// this much per attempt. Redlock only. Default DefaultNodeTimeout (50 ms).
	NodeTimeout time.Duration
	// Logger receives renewal failures and lost leases. Default slog.Default().
	Logger *slog.Logger
	// TokenTTL, when positive, makes a key's fencing counter expire after this long without a fresh
	// acquisition, so keys that are locked once (a typo, a retired SKU) leave nothing behind for good.
	// Default 0: counters are kept forever, as Redisson keeps them. A counter that expired restarts at 1;
	// a store that refuses the lower token (a stale fence) recovers with RaiseToken. Fencing then only
	// protects against holders paused for less than TokenTTL.
	TokenTTL time.Duration
	// TracerProvider makes the span of each acquisition ("lock acquire"). Default otel.GetTracerProvider():
	// the global provider, a no-op until one is installed.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics stockflow.lock.wait, stockflow.lock.hold and stockflow.lock.lost.
	// Default otel.GetMeterProvider(): the global provider, a no-op until one is installed.
	MeterProvider metric.MeterProvider
}

func (c *Config) setDefaults() {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
}

// Validate reports a configuration that cannot work. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < MinLease) {
		return fmt.Errorf("rlock: Lease must be 0 (the default) or at least %v, got %v", MinLease, c.Lease)
	}
	if c.NodeTimeout < 0 {
		return fmt.Errorf("rlock: NodeTimeout must not be negative, got %v", c.NodeTimeout)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("rlock: MaxWait must not be negative, got %v", c.MaxWait)
	}
	if c.TokenTTL < 0 {
		return fmt.Errorf("rlock: TokenTTL must not be negative, got %v", c.TokenTTL)
	}
	return nil
}
