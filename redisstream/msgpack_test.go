package redisstream

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// unpackEntries reads what Redis's own cmsgpack packs, at every size where msgpack changes its header:
// strings (fix, 8, 16, 32-bit lengths), arrays (fix, 16, 32) and delivery counts (fixint, 8..64-bit).
func TestUnpackEntriesReadsWhatCmsgpackPacks(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	// ARGV: the entry count, then per entry id, deliveries (0: a read's two-part entry), field, value.
	const pack = `
local n, list, a = tonumber(ARGV[1]), {}, 2
for i = 1, n do
  local e = {ARGV[a], {ARGV[a + 2], ARGV[a + 3], 'payload', ARGV[a + 3]}}
  if ARGV[a + 1] ~= '0' then e[3] = tonumber(ARGV[a + 1]) end
  list[i], a = e, a + 4
end
return cmsgpack.pack(list)`
	sizes := []int{0, 1, 31, 32, 255, 256, 65535, 65536}
	deliveries := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1 << 52}
	for _, count := range []int{0, 1, 15, 16, 65535, 65536} {
		t.Run(fmt.Sprintf("%d entries", count), func(t *testing.T) {
			args := []any{count}
			want := make([]Entry, count)
			for i := range count {
				id := fmt.Sprintf("%d-%d", 1700000000000+i, i)
				value := strings.Repeat("v", sizes[i%len(sizes)])
				if count > 100 {
					value = "v" // 65,536 entries of 64 KiB would be 4 GiB
				}
				d := deliveries[i%len(deliveries)]
				args = append(args, id, d, "_watermill_message_uuid", value)
				want[i] = Entry{ID: id, Deliveries: max(d, 1), Values: map[string]any{"_watermill_message_uuid": value, "payload": value}}
			}
			packed, err := rdb.Eval(ctx, pack, nil, args...).Text()
			if err != nil {
				t.Fatal(err)
			}
			got, err := unpackEntries(packed)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) && !(count == 0 && len(got) == 0) {
				t.Fatalf("unpacked %d entries, not the %d packed (first %+.200v)", len(got), count, got[:min(1, len(got))])
			}
			if count > 0 {
				if _, err := unpackEntries(packed[:len(packed)-1]); err == nil {
					t.Fatal("a packing cut short unpacked without an error")
				}
			}
		})
	}
}

// No input makes unpackEntries panic, and packed entries cut short anywhere are refused, never read as
// fewer entries.
func FuzzUnpackEntries(f *testing.F) {
	var valid []byte
	valid = append(valid, 0x92)                                                      // two entries
	valid = appendMsgpackStr(append(valid, 0x92), "1-1")                             // {id,
	valid = appendMsgpackStr(appendMsgpackStr(append(valid, 0x92), "payload"), "{}") // {payload, {}}}
	valid = appendMsgpackStr(append(valid, 0x93), "1-2")                             // {id,
	valid = appendMsgpackStr(appendMsgpackStr(append(valid, 0x92), "payload"), "{}")
	valid = append(valid, 0xcd, 0x01, 0x00) // deliveries 256}
	f.Add(string(valid))
	f.Add("\x90")
	f.Add("\xdd\xff\xff\xff\xff")
	f.Fuzz(func(t *testing.T, packed string) {
		entries, err := unpackEntries(packed)
		if err != nil {
			return
		}
		for cut := range len(packed) {
			if _, err := unpackEntries(packed[:cut]); err == nil {
				t.Fatalf("%q unpacked %d entries, and so did its first %d bytes", packed, len(entries), cut)
			}
		}
	})
}
