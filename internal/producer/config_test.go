package producer

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stream"
)

func noEnv(string) (string, bool) { return "", false }

func TestFlagsDefaultToDefaultConfig(t *testing.T) {
	var c Config
	if err := parseFlags(&c); err != nil {
		t.Fatal(err)
	}
	if c != DefaultConfig() {
		t.Errorf("flags with only a Redis URL give\n%+v\nwant DefaultConfig\n%+v", c, DefaultConfig())
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

// The producer writes to the Redis it is given, never to one it guesses: without REDIS_URL or --redis-url
// it stops before connecting, naming both.
func TestFlagsRequireTheRedisURL(t *testing.T) {
	var c Config
	s := config.NewSet("producer", noEnv)
	Flags(s, &c)
	err := s.Parse([]string{"--orders", "5"})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL is not set: give REDIS_URL or --redis-url") {
		t.Errorf("without a Redis URL: %v, want an error naming REDIS_URL and --redis-url", err)
	}
	s = config.NewSet("producer", func(k string) (string, bool) { return "redis://env:1/0", k == "REDIS_URL" })
	Flags(s, &c)
	if err := s.Parse(nil); err != nil || c.RedisURL != "redis://env:1/0" {
		t.Errorf("with REDIS_URL: %v, URL %q", err, c.RedisURL)
	}
}

// parseFlags parses args after --redis-url with the URL DefaultConfig has.
func parseFlags(c *Config, args ...string) error {
	s := config.NewSet("producer", noEnv)
	Flags(s, c)
	return s.Parse(append([]string{"--redis-url", stream.DefaultRedisURL}, args...))
}

func TestValidateNamesTheFirstBadSetting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no orders", func(c *Config) { c.Orders = 0 }, "invalid --orders 0: publishes nothing; with --seed-stock it only seeds"},
		{"fewer than no orders", func(c *Config) { c.Orders, c.SeedStock = -1, 5 }, "invalid --orders -1: want at least 0"},
		{"no orders and no SKUs: the orders come first", func(c *Config) { c.Orders, c.SKUs = 0, 0 }, "invalid --orders 0"},
		{"no SKUs", func(c *Config) { c.SKUs = 0 }, "invalid --skus 0"},
		{"a bad SKU in the list", func(c *Config) { c.SKUList = "A,B{1}" }, "invalid --sku-list"},
		{"an empty SKU in the list", func(c *Config) { c.SKUList = "A,,B" }, "invalid --sku-list"},
		{"no quantity", func(c *Config) { c.Quantity = 0 }, "invalid --quantity"},
		{"an unknown distribution", func(c *Config) { c.Distribution = "pareto" }, `invalid --distribution "pareto": want uniform, zipf or hot`},
		{"lines that are not a range", func(c *Config) { c.Lines = "3" }, `invalid --lines "3": want MIN-MAX`},
		{"lines that are not numbers", func(c *Config) { c.Lines = "a-b" }, `invalid --lines "a-b": want MIN-MAX`},
		{"lines with more after the range", func(c *Config) { c.Lines = "2-5x" }, `invalid --lines "2-5x": want MIN-MAX`},
		{"lines with a sign", func(c *Config) { c.Lines = "+2-5" }, `invalid --lines "+2-5": want MIN-MAX`},
		{"a range of lines from 0", func(c *Config) { c.Lines = "0-3" }, `invalid --lines "0-3": want 1 <= MIN <= MAX <= 50`},
		{"a range of lines upside down", func(c *Config) { c.Lines = "4-2" }, `invalid --lines "4-2": want 1 <= MIN <= MAX <= 50`},
		{"more lines than a basket may have", func(c *Config) { c.Lines, c.SKUs = "1-51", 100 }, `invalid --lines "1-51": want 1 <= MIN <= MAX <= 50`},
		{"more lines than SKUs", func(c *Config) { c.Lines = "2-11" }, `invalid --lines "2-11": a basket's lines have distinct SKUs, and there are only 10`},
		{"more lines than distinct SKUs in the list", func(c *Config) { c.Lines, c.SKUList = "3-3", "A,B,A" }, "there are only 2"},
		{"a negative cancel fraction", func(c *Config) { c.Cancel = -0.1 }, "invalid --cancel -0.1: want a fraction 0..1"},
		{"a fulfil fraction over 1", func(c *Config) { c.Fulfil = 1.5 }, "invalid --fulfil 1.5: want a fraction 0..1"},
		{"a cancel fraction that is not a number", func(c *Config) { c.Cancel = math.NaN() }, "invalid --cancel NaN"},
		{"cancels and fulfils over 1 together", func(c *Config) { c.Cancel, c.Fulfil = 0.6, 0.5 }, "invalid --cancel 0.6 and --fulfil 0.5: they add up to over 1"},
		{"a negative rate", func(c *Config) { c.Rate = -5 }, "invalid --rate -5"},
		{"a rate that is not a number", func(c *Config) { c.Rate = math.NaN() }, "invalid --rate NaN"},
		{"an endless rate", func(c *Config) { c.Rate = math.Inf(1) }, "invalid --rate +Inf"},
		{"a rate too slow to schedule", func(c *Config) { c.Rate = 1e-4 }, "invalid --rate 0.0001: want orders per second, 0.001 to 1e+06"},
		{"fewer than no publishers", func(c *Config) { c.Publishers = -1 }, "invalid --publishers -1: want at least 1"},
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

func TestValidateAcceptsBasketsAndLifecycleEvents(t *testing.T) {
	for _, tc := range []struct {
		name           string
		lines          string
		skus           int
		cancel, fulfil float64
		wantLo, wantHi int
	}{
		{"single-SKU orders", "", 10, 0, 0, 0, 0},
		{"baskets of one line", "1-1", 1, 0, 0, 1, 1},
		{"baskets of as many lines as there are SKUs", "2-10", 10, 0, 0, 2, 10},
		{"the largest baskets", "50-50", 50, 0, 0, 50, 50},
		{"every order cancelled", "", 10, 1, 0, 0, 0},
		{"every order cancelled or fulfilled", "1-3", 10, 0.7, 0.3, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Lines, c.SKUs, c.Cancel, c.Fulfil = tc.lines, tc.skus, tc.cancel, tc.fulfil
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if lo, hi, _ := c.lineRange(); lo != tc.wantLo || hi != tc.wantHi {
				t.Errorf("line range %d-%d, want %d-%d", lo, hi, tc.wantLo, tc.wantHi)
			}
		})
	}
}

func TestBasketAndLifecycleFlags(t *testing.T) {
	var c Config
	if err := parseFlags(&c, "--lines", "2-5", "--cancel", "0.25", "--fulfil", "0.5"); err != nil {
		t.Fatal(err)
	}
	if c.Lines != "2-5" || c.Cancel != 0.25 || c.Fulfil != 0.5 {
		t.Errorf("flags give lines %q, cancel %v, fulfil %v; want 2-5, 0.25, 0.5", c.Lines, c.Cancel, c.Fulfil)
	}
	if err := parseFlags(&c, "--cancel", "lots"); err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Errorf("--cancel lots: %v, want an error naming the flag", err)
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

// A Config made without DefaultConfig (a struct literal) publishes from DefaultPublishers goroutines.
func TestNoPublishersMeansTheDefault(t *testing.T) {
	c := DefaultConfig()
	c.Publishers = 0
	if err := c.Validate(); err != nil || c.Publishers != DefaultPublishers {
		t.Fatalf("Validate: %v, publishers %d; want no error and %d", err, c.Publishers, DefaultPublishers)
	}
}
