package redisstream

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
)

// The little msgpack the stream needs, both ways: an outcome event's metadata is written as a msgpack map of
// strings (entryValues); fetch.lua hands the entries it reads over packed by Redis's cmsgpack, and an
// order's metadata is such a map too (unpacker: unpackEntries, Entry.plainMessage).

// appendMsgpackMapLen appends the header of a msgpack map of n pairs.
func appendMsgpackMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n)) // fixmap
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n)) // map 16
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n)) // map 32
}

// appendMsgpackStr appends s as a msgpack string.
func appendMsgpackStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n)) // fixstr
	case n < 1<<8:
		b = append(b, 0xd9, byte(n)) // str 8
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n)) // str 16
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n)) // str 32
	}
	return append(b, s...)
}

// errUnpack: packed entries that are not what fetch.lua packs.
var errUnpack = errors.New("redisstream: malformed packed entries")

// unpacker reads what cmsgpack packs from Lua values: arrays, strings (and bin) and integers. The strings it
// returns share the packed string's memory; the first malformed value sets err, and every read after it
// returns zero values.
type unpacker struct {
	s   string
	err error
}

func (u *unpacker) fail() {
	u.s, u.err = "", errUnpack
}

// take returns the next n bytes.
func (u *unpacker) take(n uint64) string {
	if n > uint64(len(u.s)) {
		u.fail()
		return ""
	}
	v := u.s[:n]
	u.s = u.s[n:]
	return v
}

// uint reads an n-byte big-endian unsigned integer.
func (u *unpacker) uint(n uint64) uint64 {
	var v uint64
	for _, c := range []byte(u.take(n)) {
		v = v<<8 | uint64(c)
	}
	return v
}

func (u *unpacker) byte() byte {
	b := u.take(1)
	if b == "" {
		return 0xc1 // never used by msgpack: fails every read below
	}
	return b[0]
}

// arrayLen reads an array's header: how many values follow (at most one per byte left).
func (u *unpacker) arrayLen() int { return u.length(0x90, 0xdc, 1) }

// mapLen reads a map's header: how many key-value pairs follow (at most one per two bytes left).
func (u *unpacker) mapLen() int { return u.length(0x80, 0xde, 2) }

// length reads the header of an array or a map: fix | n (n < 16), or the 16-bit (b16) or 32-bit (b16 + 1)
// header and n; at most one item per size bytes left.
func (u *unpacker) length(fix, b16 byte, size uint64) int {
	var n uint64
	switch b := u.byte(); {
	case b&0xf0 == fix:
		n = uint64(b & 0x0f)
	case b == b16:
		n = u.uint(2)
	case b == b16+1:
		n = u.uint(4)
	default:
		u.fail()
	}
	if size*n > uint64(len(u.s)) {
		u.fail()
		return 0
	}
	return int(n)
}

func (u *unpacker) str() string {
	var n uint64
	switch b := u.byte(); {
	case b&0xe0 == 0xa0:
		n = uint64(b & 0x1f)
	case b == 0xd9 || b == 0xc4: // str 8, bin 8
		n = u.uint(1)
	case b == 0xda || b == 0xc5:
		n = u.uint(2)
	case b == 0xdb || b == 0xc6:
		n = u.uint(4)
	default:
		u.fail()
		return ""
	}
	return u.take(n)
}

func (u *unpacker) int() int64 {
	switch b := u.byte(); {
	case b < 0x80: // positive fixint
		return int64(b)
	case b >= 0xe0: // negative fixint
		return int64(int8(b))
	case b >= 0xcc && b <= 0xcf: // uint 8..64
		v := u.uint(1 << (b - 0xcc))
		if v > math.MaxInt64 {
			u.fail()
		}
		return int64(v)
	case b >= 0xd0 && b <= 0xd3: // int 8..64
		n := uint64(1) << (b - 0xd0)
		v := u.uint(n)
		shift := 64 - 8*n
		return int64(v<<shift) >> shift
	}
	u.fail()
	return 0
}

// unpackEntries reads fetch.lua's packed entries: an array of {id, {field, value, ...}} (delivered once)
// or {id, {field, value, ...}, deliveries}. An entry's id is copied (a message keeps it); its field values
// share packed's memory (Entry.Message copies what it keeps).
func unpackEntries(packed string) ([]Entry, error) {
	u := &unpacker{s: packed}
	n := u.arrayLen()
	entries := make([]Entry, 0, n)
	for range n {
		parts := u.arrayLen()
		if parts != 2 && parts != 3 {
			u.fail()
			break
		}
		e := Entry{ID: strings.Clone(u.str()), Deliveries: 1}
		fields := u.arrayLen()
		if fields%2 != 0 {
			u.fail()
			break
		}
		e.Values = make(map[string]any, fields/2)
		for range fields / 2 {
			e.set(u.str(), u.str())
		}
		if parts == 3 {
			e.Deliveries = u.int()
		}
		if u.err != nil {
			break
		}
		entries = append(entries, e)
	}
	if u.err == nil && u.s != "" {
		u.fail()
	}
	if u.err != nil {
		return nil, u.err
	}
	return entries, nil
}
