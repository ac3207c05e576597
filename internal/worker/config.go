package worker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/inventory"
	"github.com/stockflow/stockflow/lockmw/rlock"
	"github.com/stockflow/stockflow/redisstream"
)

// Defaults of the settings.
const (
	DefaultConcurrency     = 128
	DefaultLockWait        = 5 * time.Second
	DefaultClaimIdle       = 30 * time.Second
	DefaultShutdownTimeout = 20 * time.Second
	DefaultStartupTimeout  = time.Minute
	DefaultStreamRetention = 24 * time.Hour
	DefaultResultsMaxLen   = 1_000_000
	DefaultPoisonMaxLen    = 10_000
	DefaultMaxAttempts     = 5
)

// Config is the worker's configuration.
type Config struct {
	stream.Config
	// RedlockURLs, when set, switches the locks to Redlock over these independent masters.
	RedlockURLs string
	// Name names this worker, and its consumer in the group.
	Name        string
	Concurrency int
	// KeyspaceEvents: how an idle worker learns of new orders (KEYSPACE_EVENTS): auto, on or off.
	KeyspaceEvents string
	LockLease      time.Duration
	LockWait       time.Duration
	// LockElision lets a batch of orders take its SKU's lock inside the stock script when nobody holds it
	// (inventory.ElideLock), rather than acquiring and releasing it around the script: the same exclusion
	// and fencing for two fewer scripts and one round trip less. Only with the reentrant lock on the stock's
	// Redis; default on.
	LockElision     bool
	ClaimIdle       time.Duration
	ShutdownTimeout time.Duration
	// StartupTimeout bounds the wait for Redis at start (STARTUP_TIMEOUT): past it the worker exits 1, so
	// that a wrong REDIS_URL shows as a failed start instead of a worker that waits for ever. 0: no bound.
	StartupTimeout time.Duration
	// MetricsAddr is where /metrics, /healthz and /readyz are served; default "" (off).
	MetricsAddr string
	// MetricsToken, when set, is the bearer token /metrics requires; default "" (no authentication). The
	// probes stay open: kubelet probes carry no token.
	MetricsToken string
	// PprofAddr is where /debug/pprof/ is served, and nothing else; default "" (off). An address without a
	// host (":6060") listens on 127.0.0.1 only.
	PprofAddr string
	// TraceRedis adds a span per Redis command (redisotel) to the traces.
	TraceRedis bool
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
	// LogLevel is the least level logged: debug, info (the default), warn or error.
	LogLevel string
	// RequireDurable refuses a stock Redis that may lose acknowledged writes in a crash (neither
	// appendfsync always nor REPLICA_ACKS); default false: the worker warns (checkDurability).
	RequireDurable bool
	// Replicas is how many replicas must have received each stock write before the order's outcome is
	// published (inventory.WithReplicaAcks), and each outcome event before its entry is acked
	// (redisstream.PublisherConfig.ReplicaAcks).
	Replicas stream.Replicas
}

// DefaultConfig returns the worker's settings when nothing is set: one Redis on localhost, a name made of
// the host name and the process id.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Config:          stream.DefaultConfig(),
		Name:            host + "-" + strconv.Itoa(os.Getpid()),
		Concurrency:     DefaultConcurrency,
		LockLease:       rlock.DefaultLease,
		LockWait:        DefaultLockWait,
		LockElision:     true,
		ClaimIdle:       DefaultClaimIdle,
		ShutdownTimeout: DefaultShutdownTimeout,
		StartupTimeout:  DefaultStartupTimeout,
		OutcomeTTL:      inventory.DefaultOutcomeTTL,
		StreamRetention: DefaultStreamRetention,
		GroupStart:      "$",
		LogLevel:        "info",
		KeyspaceEvents:  "auto",
		ResultsMaxLen:   DefaultResultsMaxLen,
		PoisonMaxLen:    DefaultPoisonMaxLen,
		MaxAttempts:     DefaultMaxAttempts,
		Replicas:        stream.Replicas{Timeout: stream.DefaultReplicaAckTimeout},
	}
}

// Flags defines the worker's settings on s, with the defaults of DefaultConfig.
func Flags(s *config.Set, c *Config) {
	d := DefaultConfig()
	stream.Flags(s, &c.Config)
	s.URLList(&c.RedlockURLs, "REDLOCK_URLS", d.RedlockURLs, "comma-separated Redis URLs of independent masters: take locks with Redlock on them (stock stays on REDIS_URL)")
	s.String(&c.Name, "WORKER_NAME", d.Name, "name of this worker, and of its consumer in the group")
	s.Int(&c.Concurrency, "WORKER_CONCURRENCY", d.Concurrency, "orders a process handles at once: entries read and not yet decided (reads take up to 100 at a time)")
	s.String(&c.KeyspaceEvents, "KEYSPACE_EVENTS", d.KeyspaceEvents, "the `mode` by which an idle worker learns of new orders: auto (turn Redis's keyspace events on with CONFIG SET and wait for them; poll if refused), on (notify-keyspace-events already has K and t: wait for them), off (poll every 10-100 ms)")
	s.Duration(&c.LockLease, "LOCK_LEASE", d.LockLease, "lease of a SKU lock; the watchdog renews it every third of it while held")
	s.Duration(&c.LockWait, "LOCK_WAIT", d.LockWait, "longest wait for a SKU lock before the order is retried")
	c.LockElision = d.LockElision
	s.Bool(&c.LockElision, "LOCK_ELISION", "when a SKU's lock is free, take it inside the stock script rather than around it (one round trip and two scripts less per batch; only with the lock on REDIS_URL, not Redlock); false: always acquire and release")
	s.Duration(&c.ClaimIdle, "CLAIM_IDLE", d.ClaimIdle, "how long a pending order of a dead consumer waits before another worker claims it")
	s.Duration(&c.ShutdownTimeout, "SHUTDOWN_TIMEOUT", d.ShutdownTimeout, "on SIGTERM, how long in-flight orders may take to finish")
	s.Duration(&c.StartupTimeout, "STARTUP_TIMEOUT", d.StartupTimeout, "how long the worker waits at start for Redis to answer before it exits 1 (0: for ever)")
	s.String(&c.MetricsAddr, "METRICS_ADDR", d.MetricsAddr, "listen address for /metrics, /healthz and /readyz (empty: off)")
	s.Secret(&c.MetricsToken, "METRICS_TOKEN", "bearer token that /metrics requires, at least 16 characters (empty: none); /healthz and /readyz stay open")
	s.String(&c.PprofAddr, "PPROF_ADDR", d.PprofAddr, "listen address for /debug/pprof/ only (empty: off); without a host (:6060) it listens on 127.0.0.1 only")
	s.Bool(&c.TraceRedis, "TRACE_REDIS_COMMANDS", "with tracing on, add a span per Redis command (no arguments); at full load it costs more than tracing itself (see Numbers)")
	s.Duration(&c.OutcomeTTL, "OUTCOME_TTL", d.OutcomeTTL, "how long the outcome of an order is kept for idempotency; also how long a SKU's fencing counter lives after its lock was last taken (an elided batch only creates a missing one)")
	s.Duration(&c.StreamRetention, "STREAM_RETENTION", d.StreamRetention, "orders stream entries older than this are trimmed once no group needs them (must be shorter than OUTCOME_TTL)")
	s.String(&c.GroupStart, "CONSUMER_GROUP_START", d.GroupStart, "where a new consumer group starts: $ (orders published from now on) or 0 (every order still in the stream that is younger than OUTCOME_TTL)")
	s.Int(&c.ResultsMaxLen, "RESULTS_MAXLEN", d.ResultsMaxLen, "approximate number of outcome events kept in the results stream")
	s.Int(&c.PoisonMaxLen, "POISON_MAXLEN", d.PoisonMaxLen, "approximate number of entries kept in the poison stream")
	s.Int(&c.MaxAttempts, "MAX_ATTEMPTS", d.MaxAttempts, "deliveries of an order that fails permanently (or whose worker dies) before it goes to the poison stream")
	stream.ReplicaFlags(s, &c.Replicas, "each stock write (reservation and outcome record)")
	s.String(&c.LogLevel, "LOG_LEVEL", "info", "the least `level` of the log lines written: debug, info, warn or error")
	s.Bool(&c.RequireDurable, "REQUIRE_DURABLE", "refuse to start when the stock Redis may lose acknowledged writes in a crash (neither appendonly with appendfsync always nor REPLICA_ACKS); without it the worker warns")
	s.Bool(&c.AllowEviction, "ALLOW_EVICTION", "run even when Redis may evict keys (maxmemory-policy other than noeviction): evicted outcome records mean double reservations")
}

// Validate reports every setting that cannot work, by name.
func (c Config) Validate() error {
	return errors.Join(
		c.Config.Validate(),
		c.Replicas.Validate(),
		c.validateRedlock(),
		config.CheckNotEmpty("WORKER_NAME", c.Name),
		config.Check(between(c.Concurrency, 1, 1024), "WORKER_CONCURRENCY", c.Concurrency, "want 1..1024"),
		config.Check(c.LockLease >= rlock.MinLease, "LOCK_LEASE", c.LockLease, fmt.Sprintf("want at least %v", rlock.MinLease)),
		config.Check(c.LockWait > 0, "LOCK_WAIT", c.LockWait, "must be positive"),
		// The entries a consumer has read ahead wait behind the one it handles, which may wait LOCK_WAIT
		// for its lock: a shorter CLAIM_IDLE hands them to another worker while this one is merely waiting.
		config.Check(c.ClaimIdle >= 3*c.LockWait, "CLAIM_IDLE", c.ClaimIdle, fmt.Sprintf(
			"want at least 3 x LOCK_WAIT (%v), or orders are claimed from workers that are only waiting for a lock", 3*c.LockWait)),
		c.validateLifetime(),
		c.validateEndpoints(),
		config.Check(c.ShutdownTimeout > 0, "SHUTDOWN_TIMEOUT", c.ShutdownTimeout, "must be positive"),
		config.Check(c.StartupTimeout >= 0, "STARTUP_TIMEOUT", c.StartupTimeout, "must not be negative"),
		c.validateLogLevel(),
		config.Check(keyspaceEvents[c.KeyspaceEvents] != 0 || c.KeyspaceEvents == "off", "KEYSPACE_EVENTS", c.KeyspaceEvents,
			"want auto, on or off"),
	)
}

// validateLogLevel checks LOG_LEVEL ("" is info).
func (c Config) validateLogLevel() error {
	if c.LogLevel == "" {
		return nil
	}
	_, err := config.ParseLogLevel(c.LogLevel)
	return err
}

func (c Config) validateRedlock() error {
	if c.TLS.Validate() != nil {
		return nil // reported under the TLS setting's own name
	}
	urls, err := c.RedlockOptions()
	if err != nil {
		return fmt.Errorf("invalid REDLOCK_URLS: %w", err)
	}
	if len(urls) == 1 || len(urls) == 2 { // the URLs are not repeated: they may hold passwords
		return fmt.Errorf("invalid REDLOCK_URLS: Redlock needs at least 3 independent masters, got %d", len(urls))
	}
	return nil
}

// RedlockOptions are the client options of the REDLOCK_URLS masters, with the TLS files; none without
// Redlock.
func (c Config) RedlockOptions() ([]*redis.Options, error) { return c.TLS.RedisURLs(c.RedlockURLs) }

// validateLifetime checks the settings that bound what Redis keeps over time.
func (c Config) validateLifetime() error {
	return errors.Join(
		config.Check(c.OutcomeTTL >= time.Minute, "OUTCOME_TTL", c.OutcomeTTL, "want at least 1m"),
		// A trimmed entry can no longer be delivered; one still in the stream can, to a new group or a
		// replay, and must then find its record.
		config.Check(c.StreamRetention >= time.Second && c.StreamRetention < c.OutcomeTTL, "STREAM_RETENTION", c.StreamRetention, fmt.Sprintf(
			"want at least 1s and less than OUTCOME_TTL (%v), or an order still in the stream could be reserved twice once its outcome record expired", c.OutcomeTTL)),
		config.Check(c.GroupStart == "$" || c.GroupStart == "0", "CONSUMER_GROUP_START", fmt.Sprintf("%q", c.GroupStart), "want $ or 0"),
		config.Check(c.ResultsMaxLen >= 100, "RESULTS_MAXLEN", c.ResultsMaxLen, "want at least 100"),
		config.Check(c.PoisonMaxLen >= 100, "POISON_MAXLEN", c.PoisonMaxLen, "want at least 100"),
		config.Check(between(c.MaxAttempts, 1, 1000), "MAX_ATTEMPTS", c.MaxAttempts, "want 1..1000"),
	)
}

// minMetricsToken is the length of the shortest METRICS_TOKEN accepted.
const minMetricsToken = 16

// validateEndpoints checks METRICS_ADDR, PPROF_ADDR and METRICS_TOKEN; the messages never show the token.
func (c Config) validateEndpoints() error {
	_, _, err := net.SplitHostPort(c.PprofAddr)
	_, _, merr := net.SplitHostPort(c.MetricsAddr)
	return errors.Join(
		config.Check(c.MetricsAddr == "" || merr == nil, "METRICS_ADDR", fmt.Sprintf("%q", c.MetricsAddr), "want host:port, or :port for every address"),
		config.Check(c.PprofAddr == "" || err == nil, "PPROF_ADDR", fmt.Sprintf("%q", c.PprofAddr), "want host:port, or :port for 127.0.0.1:port"),
		config.Check(c.MetricsToken == "" || utf8.RuneCountInString(c.MetricsToken) >= minMetricsToken, "METRICS_TOKEN", "(not shown)",
			fmt.Sprintf("too short, want at least %d characters (openssl rand -hex 32 makes one)", minMetricsToken)),
		// Prometheus trims a credentials_file and HTTP trims header values, so a token ending in white space
		// would never match; inside a token it is not allowed either (RFC 6750).
		config.Check(!strings.ContainsFunc(c.MetricsToken, unicode.IsSpace), "METRICS_TOKEN", "(not shown)",
			"contains white space (a line break at the end of the secret's file?), which a bearer token cannot hold"),
	)
}

func between(v, lo, hi int) bool { return lo <= v && v <= hi }

// replayFrom is where a group starts that is to read "every order still in the stream" (a new group with
// CONSUMER_GROUP_START=0, or a lost group created again): the first entry younger than OUTCOME_TTL, less a
// margin (a tenth, at most a minute) for clocks that disagree. An older entry is only there because some
// group still needs it, and its outcome record may have expired: delivering it could reserve it twice.
func (c Config) replayFrom(now time.Time) string {
	ms := max(now.Add(-c.OutcomeTTL+min(c.OutcomeTTL/10, time.Minute)).UnixMilli(), 0)
	return strconv.FormatInt(ms, 10) + "-0"
}

// keyspaceEvents are the values of KEYSPACE_EVENTS ("off" is the zero Events).
var keyspaceEvents = map[string]redisstream.KeyspaceEvents{"off": redisstream.KeyspaceEventsOff,
	"on": redisstream.KeyspaceEventsOn, "auto": redisstream.KeyspaceEventsAuto}
