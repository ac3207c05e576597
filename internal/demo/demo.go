// Package demo runs the whole pipeline on one machine: a Redis, several workers and a producer with a
// hot-SKU mix, then prints the outcome table, the consistency check and the lock wait summary.
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/internal/worker"
)

// Config sizes the scenario.
type Config struct {
	Redis        string // auto | server | embedded; REDIS_URL set wins
	RedisURL     string
	TLS          config.TLSFiles // of a rediss:// REDIS_URL
	Workers      int
	Concurrency  int
	Orders       int
	SKUs         int
	Stock        int
	Distribution string
	Lines        string  // baskets of MIN-MAX lines ("": single-SKU orders)
	Cancel       float64 // fraction of the orders cancelled afterwards
	Fulfil       float64 // fraction of the orders fulfilled afterwards
	Timeout      time.Duration
	Cluster      bool // a Redis Cluster: REDIS_URL's, or a local one of 3 masters
	Partitions   int  // stream partitions; 0: 1 on one Redis, 16 on a cluster
}

// Flags defines the demo's settings on s.
func Flags(s *config.Set, c *Config) {
	s.URL(&c.RedisURL, "REDIS_URL", "", "use this Redis instead of starting one")
	config.TLSFlags(s, &c.TLS)
	s.String(&c.Redis, "redis", "auto", "without REDIS_URL, the Redis to start (`mode`): server (a redis-server child process), embedded (in-process miniredis) or auto (server when installed)")
	s.Int(&c.Workers, "workers", 3, "worker instances")
	s.Int(&c.Concurrency, "concurrency", worker.DefaultConcurrency, "orders each worker handles at once (its WORKER_CONCURRENCY)")
	s.Int(&c.Orders, "orders", 6000, "orders to publish")
	s.Int(&c.SKUs, "skus", 20, "SKUs")
	s.Int(&c.Stock, "stock", 200, "stock of each SKU")
	s.String(&c.Distribution, "distribution", "hot", "`distribution` of the orders over the SKUs: uniform, zipf or hot (half of the orders on SKU-0)")
	s.String(&c.Lines, "lines", "1-3", "each order a basket of `min-max` lines over distinct SKUs (\"\": single-SKU orders)")
	s.Float(&c.Cancel, "cancel", 0.1, "`fraction` of the orders cancelled after they were placed")
	s.Float(&c.Fulfil, "fulfil", 0.2, "`fraction` of the orders fulfilled after they were placed")
	s.Duration(&c.Timeout, "timeout", 2*time.Minute, "give up waiting for outcomes after this long")
	s.Bool(&c.Cluster, "cluster", "run on a Redis Cluster: REDIS_URL's (a cluster URL), or else a local one of 3 masters (redis-server child processes)")
	s.Int(&c.Partitions, "partitions", 0, "partitions of the streams (ORDERS_PARTITIONS); 0: 1 on one Redis, 16 on a cluster")
}

// Validate reports the first setting the demo cannot run with.
func (c Config) Validate() error {
	if c.Workers < 1 || c.Concurrency < 1 {
		return errors.New("--workers and --concurrency must be at least 1")
	}
	if c.RedisURL == "" && c.TLS != (config.TLSFiles{}) {
		return errors.New("REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE apply to a rediss:// REDIS_URL; " +
			"without REDIS_URL the demo runs a Redis of its own, without TLS")
	}
	if c.Cluster && c.RedisURL == "" && redisMode(c.Redis) == "embedded" {
		return errors.New("--cluster needs redis-server (the embedded Redis is no cluster)")
	}
	if c.Partitions < 0 || c.Partitions > stream.MaxPartitions {
		return fmt.Errorf("--partitions must be 0..%d", stream.MaxPartitions)
	}
	if c.RedisURL == "" {
		return nil
	}
	return (stream.Config{RedisURL: c.RedisURL, TLS: c.TLS, Cluster: c.Cluster}).ValidateRedis()
}

// streams sets the cluster mode and partitions of the demo on s.
func (c Config) streams(s *stream.Config) {
	s.Cluster, s.OrdersPartitions = c.Cluster, c.Partitions
	if c.Partitions == 0 {
		s.OrdersPartitions = 1
		if c.Cluster {
			s.OrdersPartitions = 16
		}
	}
}

// Run runs the demo, printing to out. It returns an error when the consistency check fails.
func Run(ctx context.Context, cfg Config, out io.Writer, progress io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	url, stopRedis, err := startRedis(cfg, out)
	if err != nil {
		return err
	}
	defer stopRedis()
	ws, err := startWorkers(ctx, cfg, url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d workers x %d orders in flight; publishing %d orders over %d SKUs (%s), %d in stock each\n",
		cfg.Workers, cfg.Concurrency, cfg.Orders, cfg.SKUs, cfg.Distribution, cfg.Stock)
	start := time.Now()
	sum, err := producer.Run(ctx, cfg.producer(url), progress)
	if err := cmp.Or(err, ws.stop()); err != nil { // the producer's error first
		return err
	}
	return report(out, sum, time.Since(start))
}

// workers are the demo's worker instances, running until stopped.
type workers struct {
	cancel context.CancelFunc
	done   chan error // what each one's Run returned
}

// startWorkers starts cfg.Workers workers on url.
func startWorkers(ctx context.Context, cfg Config, url string) (*workers, error) {
	// Workers log only errors (JSON unless stderr is a terminal): the demo's output is the summary.
	logger := config.Logger(os.Stderr, slog.LevelError)
	ctx, cancel := context.WithCancel(ctx)
	ws := &workers{cancel: cancel, done: make(chan error, cfg.Workers)}
	for i := range cfg.Workers {
		w, err := worker.New(cfg.worker(url, i), logger, worker.Options{})
		if err != nil {
			cancel()
			return nil, err
		}
		go func() { ws.done <- w.Run(ctx) }()
	}
	return ws, nil
}

// stop stops the workers, waits for them and returns the first error one of them returned.
func (ws *workers) stop() error {
	ws.cancel()
	var first error
	for range cap(ws.done) {
		if err := <-ws.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// worker is the configuration of the i-th worker.
func (c Config) worker(url string, i int) worker.Config {
	wc := worker.DefaultConfig()
	wc.RedisURL, wc.Name, wc.Concurrency = url, fmt.Sprintf("demo-%d", i), c.Concurrency
	wc.TLS = c.TLS
	c.streams(&wc.Config)
	return wc
}

// producer is the configuration of the scenario's producer: it seeds the stock and waits for every outcome.
func (c Config) producer(url string) producer.Config {
	pc := producer.DefaultConfig()
	pc.RedisURL, pc.TLS = url, c.TLS
	pc.Orders, pc.SKUs, pc.SeedStock, pc.Distribution = c.Orders, c.SKUs, c.Stock, c.Distribution
	pc.Lines, pc.Cancel, pc.Fulfil = c.Lines, c.Cancel, c.Fulfil
	pc.Wait, pc.Timeout = true, c.Timeout
	c.streams(&pc.Config)
	return pc
}

// report prints how long the run took and its summary; an inconsistent stock is an error.
func report(out io.Writer, sum *producer.Summary, took time.Duration) error {
	fmt.Fprintf(out, "done in %v\n\n", took.Round(time.Millisecond))
	sum.Print(out)
	if !sum.Consistent {
		return errors.New("consistency check failed")
	}
	return nil
}

// startRedis returns the URL of the Redis to use and how to stop it, saying which one it is.
func startRedis(cfg Config, out io.Writer) (url string, stop func(), err error) {
	if cfg.RedisURL != "" {
		fmt.Fprintf(out, "Redis: %s (from REDIS_URL)\n", config.RedactURL(cfg.RedisURL))
		return cfg.RedisURL, func() {}, nil
	}
	switch redisMode(cfg.Redis) {
	case "server":
		if cfg.Cluster {
			return startCluster(out)
		}
		return startServer(out)
	case "embedded":
		return startEmbedded(out)
	}
	return "", nil, fmt.Errorf("invalid --redis %q: want auto, server or embedded", cfg.Redis)
}

// redisMode resolves auto: a redis-server child process when one is installed, miniredis otherwise.
func redisMode(mode string) string {
	if mode != "auto" {
		return mode
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		return "server"
	}
	return "embedded"
}

// startServer starts a redis-server child process.
func startServer(out io.Writer) (url string, stop func(), err error) {
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(out, "Redis: a redis-server child process at %s\n", srv.URL())
	return srv.URL(), srv.Stop, nil
}

// startCluster starts a local Redis Cluster of 3 masters (no replicas: nothing fails over in the demo).
func startCluster(out io.Writer) (url string, stop func(), err error) {
	c, err := redisproc.StartCluster(redisproc.ClusterOptions{Masters: 3})
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(out, "Redis: a local cluster of 3 masters (redis-server child processes) at %s\n", strings.Join(c.Addrs(), ", "))
	return c.URL(), c.Stop, nil
}
