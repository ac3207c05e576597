// Package demo runs the whole pipeline on one machine: a Redis, several workers and a producer with a
// hot-SKU mix, then prints the outcome table, the consistency check and the lock wait summary.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/redisproc"
	"github.com/stockflow/stockflow/internal/worker"
)

// Config sizes the scenario.
type Config struct {
	Redis        string // auto | server | embedded; REDIS_URL set wins
	RedisURL     string
	Workers      int
	Concurrency  int
	Orders       int
	SKUs         int
	Stock        int
	Distribution string
	Timeout      time.Duration
}

// Flags defines the demo's settings on s.
func Flags(s *config.Set, c *Config) {
	s.String(&c.RedisURL, "REDIS_URL", "", "use this Redis instead of starting one")
	s.String(&c.Redis, "redis", "auto", "without REDIS_URL: server (a redis-server child process), embedded (in-process miniredis) or auto (server when installed)")
	s.Int(&c.Workers, "workers", 3, "worker instances")
	s.Int(&c.Concurrency, "concurrency", 8, "consumers per worker")
	s.Int(&c.Orders, "orders", 6000, "orders to publish")
	s.Int(&c.SKUs, "skus", 20, "SKUs")
	s.Int(&c.Stock, "stock", 200, "stock of each SKU")
	s.String(&c.Distribution, "distribution", "hot", "uniform, zipf or hot (half of the orders on SKU-0)")
	s.Duration(&c.Timeout, "timeout", 2*time.Minute, "give up waiting for outcomes after this long")
}

// Run runs the demo, printing to out. It returns an error when the consistency check fails.
func Run(ctx context.Context, cfg Config, out io.Writer, progress io.Writer) error {
	if cfg.Workers < 1 || cfg.Concurrency < 1 {
		return errors.New("--workers and --concurrency must be at least 1")
	}
	url, stop, err := startRedis(cfg, out)
	if err != nil {
		return err
	}
	defer stop()

	// Workers log only errors: the demo's output is the summary.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	done := make(chan error, cfg.Workers)
	for i := range cfg.Workers {
		var wc worker.Config
		set := config.NewSet("worker", func(string) (string, bool) { return "", false })
		worker.Flags(set, &wc)
		if err := set.Parse([]string{"--redis-url", url, "--worker-name", fmt.Sprintf("demo-%d", i),
			"--worker-concurrency", fmt.Sprint(cfg.Concurrency)}); err != nil {
			return err
		}
		w, err := worker.New(wc, logger, worker.Options{})
		if err != nil {
			return err
		}
		go func() { done <- w.Run(wctx) }()
	}
	fmt.Fprintf(out, "%d workers x %d consumers; publishing %d orders over %d SKUs (%s), %d in stock each\n",
		cfg.Workers, cfg.Concurrency, cfg.Orders, cfg.SKUs, cfg.Distribution, cfg.Stock)

	var pc producer.Config
	pset := config.NewSet("producer", func(string) (string, bool) { return "", false })
	producer.Flags(pset, &pc)
	if err := pset.Parse([]string{"--redis-url", url, "--orders", fmt.Sprint(cfg.Orders), "--skus", fmt.Sprint(cfg.SKUs),
		"--seed-stock", fmt.Sprint(cfg.Stock), "--distribution", cfg.Distribution, "--wait",
		"--wait-timeout", cfg.Timeout.String()}); err != nil {
		return err
	}
	start := time.Now()
	sum, err := producer.Run(ctx, pc, progress)
	stopWorkers()
	for range cfg.Workers {
		if werr := <-done; werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done in %v\n\n", time.Since(start).Round(time.Millisecond))
	sum.Print(out)
	if !sum.Consistent {
		return errors.New("consistency check failed")
	}
	return nil
}

// startRedis returns the URL of the Redis to use and how to stop it, saying which one it is.
func startRedis(cfg Config, out io.Writer) (string, func(), error) {
	if cfg.RedisURL != "" {
		fmt.Fprintf(out, "Redis: %s (from REDIS_URL)\n", cfg.RedisURL)
		return cfg.RedisURL, func() {}, nil
	}
	mode := cfg.Redis
	if mode == "auto" {
		mode = "embedded"
		if _, err := exec.LookPath("redis-server"); err == nil {
			mode = "server"
		}
	}
	switch mode {
	case "server":
		srv, err := redisproc.Start(redisproc.Options{})
		if err != nil {
			return "", nil, err
		}
		fmt.Fprintf(out, "Redis: a redis-server child process at %s\n", srv.URL())
		return srv.URL(), srv.Stop, nil
	case "embedded":
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return "", nil, err
		}
		url := "redis://" + m.Addr() + "/0"
		fmt.Fprintf(out, "Redis: embedded in-process miniredis at %s (no redis-server needed)\n", url)
		return url, m.Close, nil
	}
	return "", nil, fmt.Errorf("invalid --redis %q: want auto, server or embedded", cfg.Redis)
}
