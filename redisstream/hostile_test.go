package redisstream

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// An entry that gives a field twice (XADD accepts payload twice) is read as a bad entry, for the poison
// stream, naming the field: it is never decided on one of its values, since another reader could take the
// other (here quantity 1 first, 900 last). Both ways a read hands entries over: packed and as a reply.
func TestAnEntryWithAFieldTwiceIsABadEntry(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	parts := threeParts[:1]
	createGroups(t, rdb, parts...)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: parts[0].Orders, Values: []string{
		"payload", `{"order_id":"o-1","sku":"A","quantity":1}`, "payload", `{"order_id":"o-1","sku":"A","quantity":900}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	msg := receive(t, subscribe(t, newTestSubscriber(t, rdb, parts)))
	if bad := msg.Metadata.Get(UnmarshalError); !strings.Contains(bad, `"payload" given twice`) {
		t.Fatalf("entry with payload twice: bad-entry mark %q, payload %q; want it marked, naming payload", bad, msg.Payload)
	}

	// As a server without cmsgpack hands them over (parseEntries).
	entries, err := parseEntries([]any{[]any{"1-1", []any{"payload", "a", "metadata", "", "payload", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bad := entries[0].Message().Metadata.Get(UnmarshalError); !strings.Contains(bad, `"payload" given twice`) {
		t.Fatalf("unpacked entry with payload twice: mark %q, want it marked", bad)
	}
}
