package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/lockmw"
)

// Streams are the stream and group names shared by the worker and the producer.
type Streams struct {
	RedisURL      string
	OrdersStream  string
	ResultsStream string
	PoisonStream  string
}

// Defaults of the settings.
const (
	DefaultRedisURL        = "redis://127.0.0.1:6379/0"
	DefaultConcurrency     = 16
	DefaultLockWait        = 5 * time.Second
	DefaultClaimIdle       = 30 * time.Second
	DefaultShutdownTimeout = 20 * time.Second
)

// StreamFlags defines the settings of Streams on s.
func StreamFlags(s *config.Set, c *Streams) {
	s.String(&c.RedisURL, "REDIS_URL", DefaultRedisURL, "Redis for streams and stock: redis:// or rediss://, user, password and db allowed")
	s.String(&c.OrdersStream, "ORDERS_STREAM", "orders", "stream the orders are read from")
	s.String(&c.ResultsStream, "RESULTS_STREAM", "order-results", "stream the outcomes are written to")
	s.String(&c.PoisonStream, "POISON_STREAM", "orders-poison", "stream for entries that can never be processed")
}

// Config is the worker's configuration.
type Config struct {
	Streams
	ConsumerGroup string
	// RedlockURLs, when set, switches the locks to Redlock over these independent masters.
	RedlockURLs string
	// Name names this worker: its consumers are <Name>-0 .. <Name>-(Concurrency-1).
	Name            string
	Concurrency     int
	LockLease       time.Duration
	LockWait        time.Duration
	ClaimIdle       time.Duration
	ShutdownTimeout time.Duration
	MetricsAddr     string
	// TraceRedis adds a span per Redis command (redisotel) to the traces.
	TraceRedis bool
	// FaultDelayWrite is fault injection for chaos tests (handlers.Reserver.DelayWrite).
	FaultDelayWrite time.Duration
}

// Flags defines the worker's settings on s.
func Flags(s *config.Set, c *Config) {
	StreamFlags(s, &c.Streams)
	s.String(&c.ConsumerGroup, "CONSUMER_GROUP", "inventory", "consumer group of the workers")
	host, _ := os.Hostname()
	s.String(&c.RedlockURLs, "REDLOCK_URLS", "", "comma-separated Redis URLs of independent masters: take locks with Redlock on them (stock stays on REDIS_URL)")
	s.String(&c.Name, "WORKER_NAME", host+"-"+strconv.Itoa(os.Getpid()), "name of this worker; its consumers are <name>-<i>")
	s.Int(&c.Concurrency, "WORKER_CONCURRENCY", DefaultConcurrency, "consumers (messages in flight) per process")
	s.Duration(&c.LockLease, "LOCK_LEASE", lockmw.DefaultLease, "lease of a SKU lock; the watchdog renews it every third of it while held")
	s.Duration(&c.LockWait, "LOCK_WAIT", DefaultLockWait, "longest wait for a SKU lock before the order is retried")
	s.Duration(&c.ClaimIdle, "CLAIM_IDLE", DefaultClaimIdle, "how long a pending order of a dead consumer waits before another worker claims it")
	s.Duration(&c.ShutdownTimeout, "SHUTDOWN_TIMEOUT", DefaultShutdownTimeout, "on SIGTERM, how long in-flight orders may take to finish")
	s.String(&c.MetricsAddr, "METRICS_ADDR", "", "listen address for /metrics, /healthz and /readyz (empty: off)")
	s.Bool(&c.TraceRedis, "TRACE_REDIS_COMMANDS", "with tracing on, add a span per Redis command (no arguments); at full load it costs more than tracing itself (see Numbers)")
	s.Duration(&c.FaultDelayWrite, "FAULT_DELAY_WRITE", 0, "chaos tests only: hold each stock write this long after taking the lock, then send it even if the lease was lost")
}

// Validate reports the first setting that cannot work, by name.
func (c Config) Validate() error {
	var errs []error
	if _, err := config.RedisOptions(c.RedisURL); err != nil {
		errs = append(errs, fmt.Errorf("invalid REDIS_URL: %w", err))
	}
	if urls, err := config.RedisURLs(c.RedlockURLs); err != nil {
		errs = append(errs, fmt.Errorf("invalid REDLOCK_URLS: %w", err))
	} else if len(urls) > 0 && len(urls) < 3 {
		errs = append(errs, fmt.Errorf("invalid REDLOCK_URLS: Redlock needs at least 3 independent masters, got %d", len(urls)))
	}
	for _, s := range []struct{ name, v string }{
		{"ORDERS_STREAM", c.OrdersStream}, {"RESULTS_STREAM", c.ResultsStream},
		{"POISON_STREAM", c.PoisonStream}, {"CONSUMER_GROUP", c.ConsumerGroup}, {"WORKER_NAME", c.Name},
	} {
		if s.v == "" {
			errs = append(errs, fmt.Errorf("invalid %s: must not be empty", s.name))
		}
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		errs = append(errs, fmt.Errorf("invalid WORKER_CONCURRENCY %d: want 1..1024", c.Concurrency))
	}
	if c.LockLease < lockmw.MinLease {
		errs = append(errs, fmt.Errorf("invalid LOCK_LEASE %v: want at least %v", c.LockLease, lockmw.MinLease))
	}
	if c.LockWait <= 0 {
		errs = append(errs, fmt.Errorf("invalid LOCK_WAIT %v: must be positive", c.LockWait))
	}
	// The entries a consumer has read ahead wait behind the one it handles, which may wait LOCK_WAIT for
	// its lock: a shorter CLAIM_IDLE hands them to another worker while this one is merely waiting.
	if c.ClaimIdle < 3*c.LockWait {
		errs = append(errs, fmt.Errorf("invalid CLAIM_IDLE %v: want at least 3 x LOCK_WAIT (%v), or orders are claimed from workers that are only waiting for a lock", c.ClaimIdle, 3*c.LockWait))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("invalid SHUTDOWN_TIMEOUT %v: must be positive", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}
