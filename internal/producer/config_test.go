package producer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/config"
)

func noEnv(string) (string, bool) { return "", false }

func TestFlagsDefaultToDefaultConfig(t *testing.T) {
	var c Config
	if err := parseFlags(&c); err != nil {
		t.Fatal(err)
	}
	if c != DefaultConfig() {
		t.Errorf("flags without arguments give\n%+v\nwant DefaultConfig\n%+v", c, DefaultConfig())
	}
	if err := parseFlags(&c, "--orders", "5", "--wait", "--orders-stream", "o2"); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Orders, want.Wait, want.OrdersStream = 5, true, "o2"
	if c != want {
		t.Errorf("flags give\n%+v\nwant\n%+v", c, want)
	}
}

func parseFlags(c *Config, args ...string) error {
	s := config.NewSet("producer", noEnv)
	Flags(s, c)
	return s.Parse(args)
}

func TestValidateNamesTheFirstBadSetting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no orders", func(c *Config) { c.Orders = 0 }, "invalid --orders 0"},
		{"no orders and no SKUs: the orders come first", func(c *Config) { c.Orders, c.SKUs = 0, 0 }, "invalid --orders 0"},
		{"no SKUs", func(c *Config) { c.SKUs = 0 }, "invalid --skus 0"},
		{"a bad SKU in the list", func(c *Config) { c.SKUList = "A,B{1}" }, "invalid --sku-list"},
		{"an empty SKU in the list", func(c *Config) { c.SKUList = "A,,B" }, "invalid --sku-list"},
		{"no quantity", func(c *Config) { c.Quantity = 0 }, "invalid --quantity"},
		{"an unknown distribution", func(c *Config) { c.Distribution = "pareto" }, `invalid --distribution "pareto": want uniform, zipf or hot`},
		{"not a Redis URL", func(c *Config) { c.RedisURL = "http://localhost" }, "invalid REDIS_URL"},
		{"a run id that makes bad order ids", func(c *Config) { c.RunID = "run 1" }, "invalid --run-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestValidateAcceptsAndNamesTheRun(t *testing.T) {
	c := DefaultConfig()
	c.SKUList, c.SKUs = "A,B.2", 0 // --skus does not count with a list
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.RunID, "r") || len(c.RunID) < 2 {
		t.Errorf("run id %q, want a random one starting with r", c.RunID)
	}
	if c.RunID = "mine"; c.Validate() != nil || c.RunID != "mine" {
		t.Errorf("a run id that was set became %q", c.RunID)
	}
}

func TestDistributions(t *testing.T) {
	const n, draws = 10, 10000
	for _, tc := range []struct {
		name               string
		minFirst, maxFirst int // how many draws pick SKU 0
	}{
		{"uniform", draws / n * 8 / 10, draws / n * 12 / 10},
		{"hot", draws/2 + draws/n*8/10/2, draws/2 + draws/n*12/10/2}, // half, plus its share of the other half
		{"zipf", draws / 3, draws},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Distribution: tc.name}
			pick := c.picker(n, rand.New(rand.NewPCG(1, 2))) // seeded: the counts are the same every run
			counts := make([]int, n)
			for range draws {
				i := pick()
				if i < 0 || i >= n {
					t.Fatalf("picked SKU %d of %d", i, n)
				}
				counts[i]++
			}
			if counts[0] < tc.minFirst || counts[0] > tc.maxFirst {
				t.Errorf("SKU 0 got %d of %d orders, want %d..%d (counts %v)", counts[0], draws, tc.minFirst, tc.maxFirst, counts)
			}
			if tc.name == "zipf" && counts[n-1] >= counts[1] {
				t.Errorf("zipf gave the last SKU %d orders and the second %d: want best sellers (counts %v)", counts[n-1], counts[1], counts)
			}
		})
	}
}
