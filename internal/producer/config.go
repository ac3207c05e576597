package producer

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stream"
	"github.com/stockflow/stockflow/order"
)

// Defaults of the settings.
const (
	DefaultOrders       = 1000            // orders a run publishes
	DefaultSKUs         = 10              // SKUs the orders spread over, SKU-0 .. SKU-9
	DefaultQuantity     = 1               // quantity of each order
	DefaultDistribution = "uniform"       // how the orders spread over the SKUs
	DefaultSeedStock    = -1              // leave the stock as it is
	DefaultWaitTimeout  = 2 * time.Minute // how long --wait waits for the outcomes
	DefaultLines        = ""              // single-SKU orders, no baskets
	DefaultCancel       = 0               // no order is cancelled
	DefaultFulfil       = 0               // no order is fulfilled
	DefaultPublishers   = 8               // goroutines publishing at once
)

// Config is the producer's configuration.
type Config struct {
	stream.Config
	Orders       int    // default DefaultOrders
	SKUs         int    // default DefaultSKUs; ignored when SKUList is set
	SKUList      string // comma-separated SKUs; default none
	Quantity     int    // default DefaultQuantity
	Distribution string // uniform, zipf or hot; default DefaultDistribution
	// Lines is "MIN-MAX": each order is a basket of MIN to MAX lines (1 <= MIN <= MAX <= 50) of distinct
	// SKUs drawn by Distribution, each of Quantity. Default DefaultLines: single-SKU orders.
	Lines string
	// Cancel and Fulfil are the fractions of the orders (0..1, adding up to at most 1) that a cancel or a
	// fulfil event of the order follows, lifecycleLag orders later. Default DefaultCancel, DefaultFulfil.
	Cancel, Fulfil float64
	// Rate is orders per second, 0 (the default): as fast as possible.
	Rate float64
	// Publishers is how many goroutines publish at once; 0 means DefaultPublishers. 1 publishes the events
	// in order.
	Publishers int
	// SeedStock is set as each SKU's available stock before publishing; < 0 (DefaultSeedStock): leave the
	// stock as it is. Seeding refuses SKUs that have stock already, unless Force.
	SeedStock int
	Force     bool          // with SeedStock: overwrite the stock of SKUs that have some; default off
	Wait      bool          // wait for every outcome and check consistency; default off
	Timeout   time.Duration // with Wait: how long to wait; default DefaultWaitTimeout
	JSON      bool          // print the summary as JSON; default off
	RunID     string        // prefix of the order ids; default (empty): Validate picks a random one
	// Replicas is how many replicas must have received each order's XADD before it counts as published.
	Replicas stream.Replicas
}

// DefaultConfig returns the producer's settings when nothing is set: the default streams on a Redis on
// localhost (which Flags never leaves: REDIS_URL is required there), DefaultOrders orders of DefaultQuantity spread uniformly over DefaultSKUs SKUs, no waiting.
func DefaultConfig() Config {
	return Config{
		Config:       stream.DefaultConfig(),
		Orders:       DefaultOrders,
		SKUs:         DefaultSKUs,
		Quantity:     DefaultQuantity,
		Distribution: DefaultDistribution,
		Lines:        DefaultLines,
		Cancel:       DefaultCancel,
		Fulfil:       DefaultFulfil,
		Publishers:   DefaultPublishers,
		SeedStock:    DefaultSeedStock,
		Timeout:      DefaultWaitTimeout,
		Replicas:     stream.Replicas{Timeout: stream.DefaultReplicaAckTimeout},
	}
}

// Flags defines the producer's settings on s, with the defaults of DefaultConfig.
func Flags(s *config.Set, c *Config) {
	d := DefaultConfig()
	stream.Flags(s, &c.Config)
	s.Require("REDIS_URL", "the producer publishes orders and may seed stock: it never guesses where")
	stream.ReplicaFlags(s, &c.Replicas, "each order's XADD")
	s.Int(&c.Orders, "orders", d.Orders, "orders to publish (0, with --seed-stock: only seed)")
	s.Int(&c.SKUs, "skus", d.SKUs, "number of SKUs, named SKU-0 .. SKU-<n-1>")
	s.String(&c.SKUList, "sku-list", d.SKUList, "comma-separated `skus` to use instead of --skus")
	s.Int(&c.Quantity, "quantity", d.Quantity, "quantity of each order")
	s.String(&c.Distribution, "distribution", d.Distribution, "`distribution` of the orders over the SKUs: uniform, zipf, or hot (half on the first SKU)")
	s.String(&c.Lines, "lines", d.Lines, "each order a basket of `min-max` lines: a random number in that range (1 <= min <= max <= 50), of distinct SKUs drawn by --distribution, sent in random order (default: single-SKU orders)")
	s.Float(&c.Cancel, "cancel", d.Cancel, fmt.Sprintf("`fraction` of the orders (0..1) that a cancel event of the order follows, %d orders later", lifecycleLag))
	s.Float(&c.Fulfil, "fulfil", d.Fulfil, fmt.Sprintf("`fraction` of the orders (0..1) that a fulfil event of the order follows, %d orders later; --cancel + --fulfil <= 1", lifecycleLag))
	s.Float(&c.Rate, "rate", d.Rate, "orders per second (0: as fast as possible)")
	s.Int(&c.Publishers, "publishers", d.Publishers, "goroutines publishing at once (1: the events in order)")
	s.Int(&c.SeedStock, "seed-stock", d.SeedStock, "set each SKU's available stock to this first (-1: leave it); refused if a SKU has stock, unless --force")
	s.Bool(&c.Force, "force", "with --seed-stock: overwrite the stock of SKUs that have some")
	s.Bool(&c.Wait, "wait", "wait for every outcome, print a summary and check consistency")
	s.Duration(&c.Timeout, "wait-timeout", d.Timeout, "with --wait: how long to wait for the outcomes")
	s.Bool(&c.JSON, "json", "print the summary as JSON")
	s.String(&c.RunID, "run-id", d.RunID, "`prefix` of the order ids (default: random)")
}

// Validate reports the first bad setting, by name. An empty RunID gets a random one.
func (c *Config) Validate() error {
	for _, validate := range []func() error{
		c.validateOrders, c.validateSKUs, c.validateSKUList, c.validateQuantity, c.validateDistribution,
		c.validateLines, c.validateLifecycle, c.validatePace, c.validateRedisURL, c.validateRunID, c.Replicas.Validate,
	} {
		if err := validate(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateOrders() error {
	switch {
	case c.Orders < 0:
		return fmt.Errorf("invalid --orders %d: want at least 0", c.Orders)
	case c.Orders == 0 && c.SeedStock < 0:
		return errors.New("invalid --orders 0: publishes nothing; with --seed-stock it only seeds the stock")
	}
	return nil
}

// validatePace checks the rate and the publishers; no publishers (a Config not from DefaultConfig) get
// DefaultPublishers.
func (c *Config) validatePace() error {
	c.Publishers = cmp.Or(c.Publishers, DefaultPublishers)
	switch {
	case c.Rate != 0 && !(c.Rate >= minRate && c.Rate <= maxRate): // NaN too
		return fmt.Errorf("invalid --rate %v: want orders per second, %v to %v (0: as fast as possible)", c.Rate, minRate, maxRate)
	case c.Publishers < 1:
		return fmt.Errorf("invalid --publishers %d: want at least 1", c.Publishers)
	}
	return nil
}

// The rates a run can keep: an order every 1,000 s at the least (the schedule stays within time.Duration),
// a microsecond apart at the most.
const minRate, maxRate = 0.001, 1e6

func (c *Config) validateSKUs() error {
	if c.SKUList == "" && c.SKUs < 1 {
		return fmt.Errorf("invalid --skus %d: want at least 1", c.SKUs)
	}
	return nil
}

func (c *Config) validateSKUList() error {
	for _, sku := range c.skus() {
		if err := order.ValidateSKU(sku); err != nil {
			return fmt.Errorf("invalid --sku-list: %w", err)
		}
	}
	return nil
}

func (c *Config) validateQuantity() error {
	if err := order.ValidateQuantity(int64(c.Quantity)); err != nil {
		return fmt.Errorf("invalid --quantity: %w", err)
	}
	return nil
}

func (c *Config) validateDistribution() error {
	if _, ok := distributions[c.Distribution]; !ok {
		return fmt.Errorf("invalid --distribution %q: want uniform, zipf or hot", c.Distribution)
	}
	return nil
}

func (c *Config) validateLines() error {
	_, most, err := c.lineRange()
	if n := len(distinct(c.skus())); err == nil && most > n {
		return fmt.Errorf("invalid --lines %q: a basket's lines have distinct SKUs, and there are only %d (--skus, --sku-list)", c.Lines, n)
	}
	return err
}

// lineRange reads Lines: the fewest and the most lines of an order, 0 and 0 for single-SKU orders.
func (c *Config) lineRange() (fewest, most int, err error) {
	if c.Lines == "" {
		return 0, 0, nil
	}
	// Printed back, the numbers read must be what was written: no sign, space or trailing text.
	if _, err := fmt.Sscanf(c.Lines, "%d-%d", &fewest, &most); err != nil || fmt.Sprintf("%d-%d", fewest, most) != c.Lines {
		return 0, 0, fmt.Errorf("invalid --lines %q: want MIN-MAX, as 2-5", c.Lines)
	}
	ok := 1 <= fewest && fewest <= most && most <= order.MaxLines
	return fewest, most, config.Check(ok, "--lines", strconv.Quote(c.Lines), fmt.Sprintf("want 1 <= MIN <= MAX <= %d", order.MaxLines))
}

// validateLifecycle checks --cancel and --fulfil: fractions, and an order is followed by one of them at
// most.
func (c *Config) validateLifecycle() error {
	const fraction = "want a fraction 0..1"
	if err := cmp.Or(config.Check(c.Cancel >= 0 && c.Cancel <= 1, "--cancel", c.Cancel, fraction), // NaN fails too
		config.Check(c.Fulfil >= 0 && c.Fulfil <= 1, "--fulfil", c.Fulfil, fraction)); err != nil {
		return err
	}
	if c.Cancel+c.Fulfil > 1+1e-9 {
		return fmt.Errorf("invalid --cancel %v and --fulfil %v: they add up to over 1 (an order is followed by one of them at most)", c.Cancel, c.Fulfil)
	}
	return nil
}

// validateRedisURL checks REDIS_URL and the TLS files.
func (c *Config) validateRedisURL() error { return c.Config.ValidateRedis() }

// validateRunID picks a run id when none is set, and checks that the last order's id is a valid one.
func (c *Config) validateRunID() error {
	if c.RunID == "" {
		c.RunID = "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if err := order.ValidateOrderID(c.RunID + "-" + strconv.Itoa(c.Orders)); err != nil {
		return fmt.Errorf("invalid --run-id: %w", err)
	}
	return nil
}

// skus lists the SKUs the orders go to.
func (c *Config) skus() []string {
	if c.SKUList != "" {
		return strings.Split(c.SKUList, ",")
	}
	out := make([]string, c.SKUs)
	for i := range out {
		out[i] = "SKU-" + strconv.Itoa(i)
	}
	return out
}

// distinct is skus without repeats, in their first order.
func distinct(skus []string) []string {
	seen := make(map[string]bool, len(skus))
	out := make([]string, 0, len(skus))
	for _, sku := range skus {
		if !seen[sku] {
			seen[sku] = true
			out = append(out, sku)
		}
	}
	return out
}
