package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/config"
)

func validConfig(t *testing.T) Config {
	var c Config
	s := config.NewSet("worker", func(string) (string, bool) { return "", false })
	Flags(s, &c)
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig(t).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		name    string
		change  func(*Config)
		setting string
	}{
		{"a non-Redis URL is refused", func(c *Config) { c.RedisURL = "http://x" }, "REDIS_URL"},
		{"Redlock over two masters is refused", func(c *Config) { c.RedlockURLs = "redis://a:1,redis://b:2" }, "REDLOCK_URLS"},
		{"zero consumers are refused", func(c *Config) { c.Concurrency = 0 }, "WORKER_CONCURRENCY"},
		{"a zero lease is refused", func(c *Config) { c.LockLease = 0 }, "LOCK_LEASE"},
		{"a zero lock wait is refused", func(c *Config) { c.LockWait = 0 }, "LOCK_WAIT"},
		{"a claim idle time a lock wait could exceed is refused", func(c *Config) { c.ClaimIdle = 2 * c.LockWait }, "CLAIM_IDLE"},
		{"an empty stream name is refused", func(c *Config) { c.OrdersStream = "" }, "ORDERS_STREAM"},
		{"a metrics token under 16 characters is refused", func(c *Config) { c.MetricsToken = "0123456789abcde" }, "METRICS_TOKEN"},
		{"a metrics token ending in a line break is refused", func(c *Config) { c.MetricsToken = "0123456789abcdef\n" }, "METRICS_TOKEN"},
		{"a pprof address without a port is refused", func(c *Config) { c.PprofAddr = "localhost" }, "PPROF_ADDR"},
		{"a metrics address without a port is refused", func(c *Config) { c.MetricsAddr = "9090" }, "METRICS_ADDR"},
		{"a retention under a second is refused (trimming runs every quarter of it)", func(c *Config) { c.StreamRetention = time.Millisecond }, "STREAM_RETENTION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.setting) {
				t.Fatalf("err %v, want one naming %s", err, tc.setting)
			}
		})
	}
}
