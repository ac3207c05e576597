package rlock

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultLease is the default Config.Lease.
const DefaultLease = 30 * time.Second

// MinLease is the shortest lease accepted: the watchdog must renew within a third of it.
const MinLease = 10 * time.Millisecond

// DefaultKeyPrefix is the default Config.KeyPrefix: the lock of "SKU-1" is "lock:{SKU-1}".
const DefaultKeyPrefix = "lock:"

// DefaultNodeTimeout is the default Config.NodeTimeout.
const DefaultNodeTimeout = 50 * time.Millisecond

// DefaultHandOffs and DefaultHandOffHold are the defaults of HandOff: measured with scripts/bench.sh
// (BENCHMARKS.md), long enough that a hot key pays the Redis round trips of a release and an acquisition
// once per cohort rather than per holder, short enough that other processes wait little for their turn.
const (
	DefaultHandOffs    = 32
	DefaultHandOffHold = 20 * time.Millisecond
)

// HandOff bounds lock cohorting. When a holder releases a lock while another acquisition of the same key
// waits in this process, the lock passes to that waiter without a Redis call: the process keeps the lock
// in Redis, and its waiters take turns holding it. After Max consecutive hand-offs, or once the process
// has held the lock in Redis for Hold, the next release frees it in Redis, so other processes get their
// turn; when another process listens for the lock then, this process's acquisitions of the key give it a
// head start (yieldFor) before trying again.
type HandOff struct {
	// Max is the most consecutive local hand-offs of one lock; negative: none (every release frees the
	// lock in Redis). Default DefaultHandOffs (32).
	Max int
	// Hold is the longest the process keeps a lock in Redis while handing it on. Default
	// DefaultHandOffHold (20 ms).
	Hold time.Duration
}

// allows reports whether a hold taken in Redis since since, handed on handOffs times, may be handed on.
func (h HandOff) allows(handOffs int, since time.Time) bool {
	return handOffs < h.Max && time.Since(since) < h.Hold
}

// ShardedMode chooses between Redis's two kinds of pub/sub for unlock messages (Config.ShardedPubSub), as
// Redisson's shardedSubscriptionMode does.
type ShardedMode int

const (
	// ShardedAuto is sharded pub/sub on a Redis Cluster (NewReentrant given a *redis.ClusterClient), plain
	// pub/sub otherwise.
	ShardedAuto ShardedMode = iota
	// ShardedOn is sharded pub/sub (Redis 7+): unlock messages go out with SPUBLISH, waiters listen with
	// SSUBSCRIBE.
	ShardedOn
	// ShardedOff is plain pub/sub: PUBLISH and SUBSCRIBE.
	ShardedOff
)

// on reports whether a locker on rdb uses sharded pub/sub.
func (m ShardedMode) on(rdb redis.UniversalClient) bool {
	_, cluster := rdb.(*redis.ClusterClient)
	return m == ShardedOn || (m == ShardedAuto && cluster)
}

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
	// KeyPrefix begins the name of every lock in Redis: the lock of key K is KeyPrefix + "{K}", and its
	// unlock channel, fencing counter and latches follow from that name by Redisson's rule
	// ("redisson_lock__channel:" + name, "redisson_lock_token:" + name), so a Redisson client shares a lock
	// by calling getLock with the same name (Config.LockKey). It may not contain braces: {K} must stay the
	// hash tag that keeps a lock's keys in one Redis Cluster slot. Default DefaultKeyPrefix ("lock:").
	KeyPrefix string
	// TelemetryPrefix names the metrics (<prefix>.wait, <prefix>.hold and <prefix>.lost) and the attributes
	// of spans and metrics (<prefix>.key, <prefix>.mode, ...). Default DefaultTelemetryPrefix ("rlock").
	TelemetryPrefix string
	// TokenTTL, when positive, makes a key's fencing counter expire after this long without a fresh
	// acquisition, so keys that are locked once (a typo, a retired SKU) leave nothing behind for good.
	// Default 0: counters are kept forever, as Redisson keeps them (one small string per key ever locked). A counter that expired restarts at 1;
	// a store that refuses the lower token (a stale fence) recovers with RaiseToken. Fencing then only
	// protects against holders paused for less than TokenTTL.
	TokenTTL time.Duration
	// TracerProvider makes the span of each acquisition ("lock acquire"). Default otel.GetTracerProvider():
	// the global provider, a no-op until one is installed.
	TracerProvider trace.TracerProvider
	// HandOff bounds how long waiters in this process may pass the lock among themselves while waiters
	// elsewhere wait (lock cohorting). Each local holder is its own owner, with its own reentrancy; they
	// share the fencing token Redis issued to the process, which is safe because their turns are serialized
	// by this process: a holder's turn ends with its Release, after its writes (a write the holder
	// abandoned before its reply is not ordered by the fence, as with any lock). Other processes still get
	// a newer token, so the fence orders cohorts. A lost lease ends the cohort: the current holder's
	// context is cancelled and its waiters go back to Redis.
	HandOff HandOff
	// MeterProvider makes the metrics rlock.wait, rlock.hold and rlock.lost (under TelemetryPrefix).
	// Default otel.GetMeterProvider(): the global provider, a no-op until one is installed.
	MeterProvider metric.MeterProvider
	// ShardedPubSub chooses how unlock messages travel. Sharded (ShardedOn), the release script sends them
	// with SPUBLISH and waiters listen with SSUBSCRIBE: on a Redis Cluster a message then stays on the
	// shard of the lock's slot, where a PUBLISH is broadcast to every node over the cluster bus. Default
	// ShardedAuto: sharded when the client given to NewReentrant is a *redis.ClusterClient, plain otherwise
	// (Redlock's masters are independent servers: sharded with ShardedOn only). Every client of a lock,
	// Redisson's included, must use the same kind: a PUBLISH reaches no SSUBSCRIBE, nor an SPUBLISH a
	// SUBSCRIBE, and the waiters it misses retry only when the holder's lease would run out.
	ShardedPubSub ShardedMode
}

func (c *Config) setDefaults() {
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.NodeTimeout = cmp.Or(c.NodeTimeout, DefaultNodeTimeout)
	c.KeyPrefix = cmp.Or(c.KeyPrefix, DefaultKeyPrefix)
	c.TelemetryPrefix = cmp.Or(c.TelemetryPrefix, DefaultTelemetryPrefix)
	c.HandOff.Max = cmp.Or(c.HandOff.Max, DefaultHandOffs)
	c.HandOff.Hold = cmp.Or(c.HandOff.Hold, DefaultHandOffHold)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.TracerProvider = cmp.Or(c.TracerProvider, otel.GetTracerProvider())
	c.MeterProvider = cmp.Or(c.MeterProvider, otel.GetMeterProvider())
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
	if c.HandOff.Hold < 0 {
		return fmt.Errorf("rlock: HandOff.Hold must not be negative, got %v", c.HandOff.Hold)
	}
	if c.ShardedPubSub < ShardedAuto || c.ShardedPubSub > ShardedOff {
		return fmt.Errorf("rlock: ShardedPubSub must be ShardedAuto, ShardedOn or ShardedOff, got %d", c.ShardedPubSub)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return fmt.Errorf("rlock: KeyPrefix must not contain braces (they would move the hash tag), got %q", c.KeyPrefix)
	}
	if c.TokenTTL < 0 {
		return fmt.Errorf("rlock: TokenTTL must not be negative, got %v", c.TokenTTL)
	}
	return nil
}
