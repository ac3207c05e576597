package stockctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fields of a poison entry, as the worker writes them.
const (
	fieldReason       = "poison_reason"
	fieldSourceStream = "poison_source_stream"
	fieldSourceID     = "poison_source_id"
	fieldEntryBytes   = "poison_entry_bytes" // only on an entry poisoned without its fields (oversized)
	fieldPayload      = "payload"
	poisonPrefix      = "poison_"
)

// poisonEntry is one entry of POISON_STREAM.
type poisonEntry struct {
	ID           string `json:"id"`
	Reason       string `json:"poison_reason"`
	SourceStream string `json:"poison_source_stream"`
	SourceID     string `json:"poison_source_id"`
	OrderID      string `json:"order_id,omitempty"` // from payload, when it is JSON
	SKU          string `json:"sku,omitempty"`      // from payload, when it is JSON
	// Replayable is false for an entry poisoned without its original fields (oversized): there is nothing
	// to replay.
	Replayable bool  `json:"replayable"`
	EntryBytes int64 `json:"poison_entry_bytes,omitempty"`
}

type poisonListReport struct {
	Stream  string        `json:"stream"`
	Length  int64         `json:"length"` // entries in the stream
	Order   string        `json:"order"`  // always "newest first"
	Entries []poisonEntry `json:"entries"`
}

// runPoisonList shows the newest --limit poison entries, newest first. A missing stream is an empty one.
func runPoisonList(ctx context.Context, a *app, _ []string) (report, error) {
	stream := a.opts.PoisonStream
	n, err := a.rdb.XLen(ctx, stream).Result()
	if err != nil {
		return nil, err
	}
	msgs, err := a.rdb.XRevRangeN(ctx, stream, "+", "-", int64(a.opts.limit)).Result()
	if err != nil {
		return nil, err
	}
	return poisonListReport{Stream: stream, Length: n, Order: "newest first", Entries: convert(msgs, toPoisonEntry)}, nil
}

func toPoisonEntry(m redis.XMessage) poisonEntry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := poisonEntry{ID: m.ID, Reason: str(fieldReason), SourceStream: str(fieldSourceStream),
		SourceID: str(fieldSourceID), Replayable: replayable(m.Values)}
	e.EntryBytes, _ = strconv.ParseInt(str(fieldEntryBytes), 10, 64)
	var order struct {
		OrderID string `json:"order_id"`
		SKU     string `json:"sku"`
	}
	if json.Unmarshal([]byte(str(fieldPayload)), &order) == nil {
		e.OrderID, e.SKU = order.OrderID, order.SKU
	}
	return e
}

// replayable is the rule of poison_replay.lua: an entry can be replayed when it kept its payload.
func replayable(fields map[string]any) bool {
	_, ok := fields[fieldPayload]
	return ok
}

func (r poisonListReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "stream %s: %d entries, showing %d, newest first\n", r.Stream, r.Length, len(r.Entries))
	if len(r.Entries) == 0 {
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tSOURCE ID\tORDER\tSKU\tREASON")
	for _, e := range r.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ID, e.SourceID, dash(e.OrderID), dash(e.SKU), e.reason())
	}
	_ = tw.Flush()
}

// reason is the poison reason on one line, marked when the entry cannot be replayed.
func (e poisonEntry) reason() string {
	if e.Replayable {
		return oneLine(e.Reason)
	}
	return oneLine(fmt.Sprintf("[not replayable: %d bytes, fields not kept] %s", e.EntryBytes, e.Reason))
}

// oneLine keeps a reason on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
