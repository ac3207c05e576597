// Package stream holds the settings of the order streams that the worker, the producer, stockctl and the
// demo share (REDIS_URL, the stream and group names, ORDERS_PARTITIONS, REDIS_CLUSTER, REPLICA_ACKS): their
// flags and checks, the Redis client they name, the partitions' stream names (order.Partitions) and the
// check that every process lays the streams out alike. Reading and publishing are package redisstream's.
package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/order"
)

// DefaultRedisURL is the Redis of the streams and the stock when REDIS_URL is not set.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Config names the Redis and the streams and group the worker, the producer and stockctl share.
type Config struct {
	RedisURL string
	// TLS are the TLS files of rediss:// URLs (REDIS_TLS_*); they apply to the Redlock masters too.
	TLS           config.TLSFiles
	OrdersStream  string
	ResultsStream string
	PoisonStream  string
	ConsumerGroup string
	// Cluster: REDIS_URL names a Redis Cluster (REDIS_CLUSTER).
	Cluster bool
	// OrdersPartitions is how many partitions the orders (and outcomes, and poison) streams have
	// (ORDERS_PARTITIONS); see Partitions.
	OrdersPartitions int
}

// MaxPartitions bounds ORDERS_PARTITIONS: every consumer reads every partition in turn.
const MaxPartitions = 1024

// DefaultConfig returns the default names.
func DefaultConfig() Config {
	return Config{RedisURL: DefaultRedisURL, OrdersStream: "orders", ResultsStream: "order-results",
		PoisonStream: "orders-poison", ConsumerGroup: "inventory", OrdersPartitions: 1}
}

// Flags defines the settings of c on s, with the defaults of DefaultConfig.
func Flags(s *config.Set, c *Config) {
	d := DefaultConfig()
	s.URL(&c.RedisURL, "REDIS_URL", d.RedisURL, "Redis for streams and stock: redis:// or rediss://, user, password and db allowed")
	config.TLSFlags(s, &c.TLS)
	s.String(&c.OrdersStream, "ORDERS_STREAM", d.OrdersStream, "stream the orders are read from")
	s.String(&c.ResultsStream, "RESULTS_STREAM", d.ResultsStream, "stream the outcomes are written to")
	s.String(&c.PoisonStream, "POISON_STREAM", d.PoisonStream, "stream for entries that can never be processed")
	s.String(&c.ConsumerGroup, "CONSUMER_GROUP", d.ConsumerGroup, "consumer group of the workers")
	s.Bool(&c.Cluster, "REDIS_CLUSTER", "REDIS_URL is a Redis Cluster: redis://host:port?addr=host2:port2&addr=host3:port3")
	s.Int(&c.OrdersPartitions, "ORDERS_PARTITIONS", d.OrdersPartitions, "partitions of the streams: the orders of a SKU go to <ORDERS_STREAM>:{crc32(sku) % N} (1 on one Redis: the names as set)")
}

// Validate reports every setting of c that cannot work, by name.
func (c Config) Validate() error {
	return errors.Join(c.ValidateRedis(),
		config.CheckNotEmpty("ORDERS_STREAM", c.OrdersStream),
		config.CheckNotEmpty("RESULTS_STREAM", c.ResultsStream),
		config.CheckNotEmpty("POISON_STREAM", c.PoisonStream),
		config.CheckNotEmpty("CONSUMER_GROUP", c.ConsumerGroup),
		config.Check(c.OrdersPartitions >= 1 && c.OrdersPartitions <= MaxPartitions, "ORDERS_PARTITIONS", c.OrdersPartitions,
			fmt.Sprintf("want 1..%d", MaxPartitions)),
		c.checkNoHashTag("ORDERS_STREAM", c.OrdersStream), c.checkNoHashTag("RESULTS_STREAM", c.ResultsStream),
		c.checkNoHashTag("POISON_STREAM", c.PoisonStream))
}

// checkNoHashTag refuses braces in a stream name that gets a partition's hash tag: a tag of its own would
// put the partition's streams in different cluster slots.
func (c Config) checkNoHashTag(name, value string) error {
	partitioned := c.Cluster || c.OrdersPartitions > 1
	return config.Check(!partitioned || !strings.ContainsAny(value, "{}"), name, strconv.Quote(value),
		"no { or } with partitions: the partition's hash tag {i} must be the name's only one")
}

// ValidateRedis checks the TLS files, then REDIS_URL, naming the setting that cannot work.
func (c Config) ValidateRedis() error {
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	var err error
	if c.Cluster {
		_, err = c.TLS.ClusterOptions(c.RedisURL)
	} else {
		_, err = c.RedisOptions()
	}
	if err != nil {
		return fmt.Errorf("invalid REDIS_URL: %w", err)
	}
	return nil
}

// RedisOptions are the client options of REDIS_URL, with the TLS files.
func (c Config) RedisOptions() (*redis.Options, error) { return c.TLS.RedisOptions(c.RedisURL) }

// Client connects to REDIS_URL (lazily): a *redis.Client, or with REDIS_CLUSTER a *redis.ClusterClient.
// poolSize bounds the connections (per node on a cluster); 0 keeps go-redis's default.
func (c Config) Client(poolSize int) (redis.UniversalClient, error) {
	if !c.Cluster {
		opts, err := c.RedisOptions()
		if err != nil {
			return nil, err
		}
		opts.PoolSize = poolSize
		return redis.NewClient(opts), nil
	}
	opts, err := c.TLS.ClusterOptions(c.RedisURL)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = poolSize
	return redis.NewClusterClient(opts), nil
}

// Partitions lists the streams of every partition (order.Partitions): with one partition on one Redis
// the names as set (ORDERS_STREAM, RESULTS_STREAM, POISON_STREAM), otherwise <name>:{i}.
func (c Config) Partitions() []order.Partition {
	return order.Partitions(c.OrdersPartitions, c.Cluster, c.OrdersStream, c.ResultsStream, c.PoisonStream)
}

// PartitionOf is the partition of sku's orders (order.PartitionOf over ORDERS_PARTITIONS).
func (c Config) PartitionOf(sku string) int { return order.PartitionOf(sku, c.OrdersPartitions) }

// ErrLayout: the streams were laid out with another ORDERS_PARTITIONS than this process's.
var ErrLayout = errors.New("stream: partitions differ")

// LayoutKey is the key that records ORDERS_PARTITIONS: <ORDERS_STREAM>:partitions.
func (c Config) LayoutKey() string { return c.OrdersStream + ":partitions" }

// CheckLayout records ORDERS_PARTITIONS in Redis (LayoutKey) when nothing is recorded yet, and otherwise
// fails with ErrLayout unless it is the number recorded: a producer that routes over another number of
// partitions than the workers read would leave orders in streams that nobody reads.
func (c Config) CheckLayout(ctx context.Context, rdb redis.UniversalClient) error {
	n := max(c.OrdersPartitions, 1)
	recorded, err := rdb.SetArgs(ctx, c.LayoutKey(), n, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil // recorded now
	case err != nil:
		return fmt.Errorf("read %s: %w", c.LayoutKey(), err)
	case recorded != strconv.Itoa(n):
		return fmt.Errorf("%w: ORDERS_PARTITIONS is %d, but the streams were laid out with %s (%s); every producer and "+
			"worker must use the same. To change it: stop the producers, let the workers drain every partition, "+
			"DEL %s, then start everything with the new value", ErrLayout, n, recorded, c.LayoutKey(), c.LayoutKey())
	}
	return nil
}
