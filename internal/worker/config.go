package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw"
)

// Streams are the stream and group names shared by the worker, the producer and stockctl.
type Streams struct {
	RedisURL      string
	OrdersStream  string
	ResultsStream string
	PoisonStream  string
	ConsumerGroup string
}

// Defaults of the settings.
const (
	DefaultRedisURL        = "redis://127.0.0.1:6379/0"
	DefaultConcurrency     = 16
	DefaultLockWait        = 5 * time.Second
	DefaultClaimIdle       = 30 * time.Second
	DefaultShutdownTimeout = 20 * time.Second
	DefaultStreamRetention = 24 * time.Hour
	DefaultResultsMaxLen   = 1_000_000
	DefaultPoisonMaxLen    = 10_000
	DefaultMaxAttempts     = 5
)

// StreamFlags defines the settings of Streams on s.
func StreamFlags(s *config.Set, c *Streams) {
	s.String(&c.RedisURL, "REDIS_URL", DefaultRedisURL, "Redis for streams and stock: redis:// or rediss://, user, password and db allowed")
	s.String(&c.OrdersStream, "ORDERS_STREAM", "orders", "stream the orders are read from")
	s.String(&c.ResultsStream, "RESULTS_STREAM", "order-results", "stream the outcomes are written to")
	s.String(&c.PoisonStream, "POISON_STREAM", "orders-poison", "stream for entries that can never be processed")
	s.String(&c.ConsumerGroup, "CONSUMER_GROUP", "inventory", "consumer group of the workers")
}

// Config is the worker's configuration.
type Config struct {
	Streams
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
	// OutcomeTTL is how long an order's recorded outcome (its idempotency record) is kept.
	OutcomeTTL time.Duration
	// StreamRetention is how long entries stay in the orders stream once every group has them; it must be
	// shorter than OutcomeTTL, so every entry that can still be delivered finds its record.
	StreamRetention time.Duration
	// GroupStart is where a new consumer group starts: "$" (new entries only) or "0" (the whole stream).
	GroupStart    string
	ResultsMaxLen int // approximate bound of the results stream
	PoisonMaxLen  int // approximate bound of the poison stream
	// MaxAttempts bounds the deliveries of an order that fail permanently or never finish (a crash loop).
	MaxAttempts int
	// AllowEviction lets the worker run on a Redis whose maxmemory-policy may evict keys.
	AllowEviction bool
}

// Flags defines the worker's settings on s.
func Flags(s *config.Set, c *Config) {
	StreamFlags(s, &c.Streams)
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
	s.Duration(&c.OutcomeTTL, "OUTCOME_TTL", inventory.DefaultOutcomeTTL, "how long the outcome of an order is kept for idempotency; also how long an unused SKU's fencing counter lives")
	s.Duration(&c.StreamRetention, "STREAM_RETENTION", DefaultStreamRetention, "orders stream entries older than this are trimmed once no group needs them (must be shorter than OUTCOME_TTL)")
	s.String(&c.GroupStart, "CONSUMER_GROUP_START", "$", "where a new consumer group starts: $ (orders published from now on) or 0 (every order still in the stream that is younger than OUTCOME_TTL)")
	s.Int(&c.ResultsMaxLen, "RESULTS_MAXLEN", DefaultResultsMaxLen, "approximate number of outcome events kept in the results stream")
	s.Int(&c.PoisonMaxLen, "POISON_MAXLEN", DefaultPoisonMaxLen, "approximate number of entries kept in the poison stream")
	s.Int(&c.MaxAttempts, "MAX_ATTEMPTS", DefaultMaxAttempts, "deliveries of an order that fails permanently (or whose worker dies) before it goes to the poison stream")
	s.Bool(&c.AllowEviction, "ALLOW_EVICTION", "run even when Redis may evict keys (maxmemory-policy other than noeviction): evicted outcome records mean double reservations")
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
	errs = append(errs, c.validateLifetime()...)
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("invalid SHUTDOWN_TIMEOUT %v: must be positive", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// validateLifetime checks the settings that bound what Redis keeps over time.
func (c Config) validateLifetime() []error {
	var errs []error
	if c.OutcomeTTL < time.Minute {
		errs = append(errs, fmt.Errorf("invalid OUTCOME_TTL %v: want at least 1m", c.OutcomeTTL))
	}
	// A trimmed entry can no longer be delivered; one still in the stream can, to a new group or a
	// replay, and must then find its record.
	if c.StreamRetention <= 0 || c.StreamRetention >= c.OutcomeTTL {
		errs = append(errs, fmt.Errorf("invalid STREAM_RETENTION %v: want more than 0 and less than OUTCOME_TTL (%v), or an order still in the stream could be reserved twice once its outcome record expired", c.StreamRetention, c.OutcomeTTL))
	}
	if c.GroupStart != "$" && c.GroupStart != "0" {
		errs = append(errs, fmt.Errorf("invalid CONSUMER_GROUP_START %q: want $ or 0", c.GroupStart))
	}
	for _, s := range []struct {
		name string
		v    int
	}{{"RESULTS_MAXLEN", c.ResultsMaxLen}, {"POISON_MAXLEN", c.PoisonMaxLen}} {
		if s.v < 100 {
			errs = append(errs, fmt.Errorf("invalid %s %d: want at least 100", s.name, s.v))
		}
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("invalid MAX_ATTEMPTS %d: want 1..1000", c.MaxAttempts))
	}
	return errs
}

// replayFrom is where a group starts that is to read "every order still in the stream" (a new group with
// CONSUMER_GROUP_START=0, or a lost group created again): the first entry younger than OUTCOME_TTL, less a
// margin (a tenth, at most a minute) for clocks that disagree. An older entry is only there because some
// group still needs it, and its outcome record may have expired: delivering it could reserve it twice.
func (c Config) replayFrom(now time.Time) string {
	ms := max(now.Add(-c.OutcomeTTL+min(c.OutcomeTTL/10, time.Minute)).UnixMilli(), 0)
	return strconv.FormatInt(ms, 10) + "-0"
}
