package stream

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
)

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
			msg, err := Unmarshaller{}.Unmarshal(values)
			if err != nil {
				t.Fatalf("Unmarshal failed (a failure would stop the subscriber): %v", err)
			}
			if msg.UUID != "1-1" {
				t.Fatalf("UUID %q, want the entry id", msg.UUID)
			}
			bad := msg.Metadata.Get(MetaBadEntry)
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
