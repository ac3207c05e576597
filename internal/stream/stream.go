// Package stream is the contract of the order streams, shared by the producer, the worker, stockctl and the
// bench: the stream and group names and their settings, how an entry becomes a Watermill message (Reader,
// Unmarshaller), and how a trace travels with a message (Publisher, Consumer, Inject, Extract). It holds
// no lock and no Router, so a producer links neither.
package stream

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
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
}

// DefaultConfig returns the default names.
func DefaultConfig() Config {
	return Config{RedisURL: DefaultRedisURL, OrdersStream: "orders", ResultsStream: "order-results",
		PoisonStream: "orders-poison", ConsumerGroup: "inventory"}
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
}

// Validate reports every setting of c that cannot work, by name.
func (c Config) Validate() error {
	return errors.Join(c.ValidateRedis(),
		config.CheckNotEmpty("ORDERS_STREAM", c.OrdersStream),
		config.CheckNotEmpty("RESULTS_STREAM", c.ResultsStream),
		config.CheckNotEmpty("POISON_STREAM", c.PoisonStream),
		config.CheckNotEmpty("CONSUMER_GROUP", c.ConsumerGroup))
}

// ValidateRedis checks the TLS files, then REDIS_URL, naming the setting that cannot work.
func (c Config) ValidateRedis() error {
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if _, err := c.RedisOptions(); err != nil {
		return fmt.Errorf("invalid REDIS_URL: %w", err)
	}
	return nil
}

// RedisOptions are the client options of REDIS_URL, with the TLS files.
func (c Config) RedisOptions() (*redis.Options, error) { return c.TLS.RedisOptions(c.RedisURL) }
