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

func TestUnmarshallerDropsWhatProducersMustNotSet(t *testing.T) {
	m := message.NewMessage("u", []byte(`{}`))
	m.Metadata.Set(MetaBadEntry, strings.Repeat("x", 4<<20)) // would become a 4 MiB poison reason
	m.Metadata.Set(metaDeliveries, "999")
	m.Metadata.Set("baggage", "user=alice")
	m.Metadata.Set("tracestate", strings.Repeat("a", maxTracestate+1))
	m.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m.Metadata.Set("team", "kept")
	values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("orders", m)
	if err != nil {
		t.Fatal(err)
	}
	values = asRedisReturnsThem(values)
	values[entryIDField], values[entryDeliveriesField] = "1-1", int64(2)
	got, err := Unmarshaller{}.Unmarshal(values)
	if err != nil {
		t.Fatal(err)
	}
	md := got.Metadata
	if md.Get(MetaBadEntry) != "" || md.Get("baggage") != "" || md.Get("tracestate") != "" {
		t.Errorf("metadata %v: the worker's mark, baggage and an oversized tracestate must be dropped", md)
	}
	if Deliveries(got) != 2 || md.Get("team") != "kept" || md.Get("traceparent") == "" {
		t.Errorf("metadata %v: want the reader's delivery count (2), other keys and a valid traceparent kept", md)
	}
}

// FuzzUnmarshaller: no entry, however broken, makes the unmarshaller fail or panic (either would stop the
// subscriber for good); every message keeps its entry id and delivery count and carries no worker mark
// the producer set.
//
//	go test -run '^$' -fuzz FuzzUnmarshaller -fuzztime 5m ./internal/stream/
func FuzzUnmarshaller(f *testing.F) {
	good, _ := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("orders", message.NewMessage("u", []byte(`{"order_id":"o"}`)))
	f.Add("payload", []byte(`{"order_id":"o"}`), good["metadata"].([]byte), "u")
	f.Add("payload", []byte("p"), []byte("\xc1garbage"), "")
	f.Add("other", []byte{}, []byte{0x81, 0xa1, 'k', 0xc0}, "x")
	f.Fuzz(func(t *testing.T, field string, payload, metadata []byte, uuid string) {
		values := map[string]any{field: string(payload), "metadata": string(metadata),
			redisstream.UUIDHeaderKey: uuid, entryIDField: "7-1", entryDeliveriesField: int64(3)}
		msg, err := Unmarshaller{}.Unmarshal(values)
		if err != nil || msg == nil {
			t.Fatalf("Unmarshal failed: %v", err)
		}
		if msg.UUID != "7-1" || Deliveries(msg) != 3 {
			t.Fatalf("message %s with %d deliveries, want the entry's 7-1 and 3", msg.UUID, Deliveries(msg))
		}
		if bad := msg.Metadata.Get(MetaBadEntry); bad != "" && len(bad) > 1024 {
			t.Fatalf("bad-entry mark of %d bytes", len(bad))
		}
	})
}

// asRedisReturnsThem turns the marshaller's byte values into the strings Redis hands back.
func asRedisReturnsThem(values map[string]any) map[string]any {
	for k, v := range values {
		if b, ok := v.([]byte); ok {
			values[k] = string(b)
		}
	}
	return values
}
