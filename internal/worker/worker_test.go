package worker

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

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

func TestEntryUnmarshaller(t *testing.T) {
	watermillEntry, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("orders",
		func() *message.Message {
			m := message.NewMessage("wm-uuid", []byte(`{"order_id":"o"}`))
			m.Metadata.Set("traceparent", "00-abc-def-01")
			return m
		}())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		values    map[string]any
		payload   string
		meta      string // expected traceparent
		badReason string // "" when readable
	}{
		{"a Watermill entry keeps its payload and metadata", watermillEntry, `{"order_id":"o"}`, "00-abc-def-01", ""},
		{"a plain XADD with a payload is readable", map[string]any{"payload": `{"x":1}`}, `{"x":1}`, "", ""},
		{"an entry without payload is marked", map[string]any{"foo": "bar"}, "", "", "payload"},
		{"an entry whose fields are not strings is marked", map[string]any{"payload": 42}, "", "", "unreadable"},
		{"an entry with broken metadata is marked", map[string]any{"payload": "p", "metadata": "\xc1garbage"}, "", "", "unreadable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{entryIDField: "1-1"}
			for k, v := range tc.values {
				if b, ok := v.([]byte); ok {
					v = string(b) // Redis hands every field back as a string
				}
				values[k] = v
			}
			msg, err := entryUnmarshaller{}.Unmarshal(values)
			if err != nil {
				t.Fatalf("Unmarshal failed (a failure would stop the subscriber): %v", err)
			}
			if msg.UUID != "1-1" {
				t.Fatalf("UUID %q, want the entry id", msg.UUID)
			}
			bad := msg.Metadata.Get(metaBadEntry)
			if tc.badReason == "" {
				if bad != "" || string(msg.Payload) != tc.payload || msg.Metadata.Get("traceparent") != tc.meta {
					t.Fatalf("got payload %q meta %v bad %q", msg.Payload, msg.Metadata, bad)
				}
				return
			}
			if !strings.Contains(bad, tc.badReason) {
				t.Fatalf("bad-entry mark %q, want one mentioning %q", bad, tc.badReason)
			}
		})
	}
}
