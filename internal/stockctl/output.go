package stockctl

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/inventory"
)

// app is what a command works with: the settings, the Redis clients and the output.
type app struct {
	opts    *options
	rdb     *redis.Client   // REDIS_URL: streams and stock
	masters []*redis.Client // REDLOCK_URLS, empty without Redlock
	store   *inventory.Store
	stdout  io.Writer
}

func newApp(o *options, stdout io.Writer) (*app, error) {
	for _, s := range []struct{ name, v string }{
		{"ORDERS_STREAM", o.OrdersStream}, {"POISON_STREAM", o.PoisonStream}, {"CONSUMER_GROUP", o.ConsumerGroup},
	} {
		if s.v == "" {
			return nil, usageError(fmt.Sprintf("invalid %s: must not be empty", s.name))
		}
	}
	opts, err := config.RedisOptions(o.RedisURL)
	if err != nil {
		return nil, usageError(fmt.Sprintf("invalid REDIS_URL: %v", err))
	}
	masters, err := config.RedisURLs(o.redlockURLs)
	if err != nil {
		return nil, usageError(fmt.Sprintf("invalid REDLOCK_URLS: %v", err))
	}
	a := &app{opts: o, rdb: redis.NewClient(opts), stdout: stdout}
	for _, m := range masters {
		a.masters = append(a.masters, redis.NewClient(m))
	}
	a.store = inventory.New(a.rdb)
	return a, nil
}

func (a *app) close() {
	_ = a.rdb.Close()
	for _, m := range a.masters {
		_ = m.Close()
	}
}

// report is the result of a command: JSON with --json, its text otherwise.
type report interface {
	writeText(w io.Writer)
}

func (a *app) emit(r report) error {
	if a.opts.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.writeText(a.stdout)
	return nil
}

// table writes aligned columns; call Flush.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// millis is a duration in whole milliseconds, for JSON.
func millis(d time.Duration) int64 { return d.Milliseconds() }

// human prints a duration in milliseconds rounded for reading.
func human(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// replyMap reads a map reply of RESP3 (a map) or RESP2 (a flat list of names and values).
func replyMap(v any) map[string]any {
	m := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			if s, ok := k.(string); ok {
				m[s] = x
			}
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if s, ok := v[i].(string); ok {
				m[s] = v[i+1]
			}
		}
	}
	return m
}
