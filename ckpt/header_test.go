package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func sampleHeader() Header {
	return Header{ID: 42, Gen: 3, Epoch: 7, Rank: 2, NumRanks: 4, PayloadCRC: 0xdeadbeef, LayoutCRC: 0x1234, Regions: []uint64{10, 0, 4096}}
}

func encodeHeader(t testing.TB, h Header) []byte {
	b := make([]byte, h.Len())
	if _, err := h.Encode(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader()
	b := encodeHeader(t, h)
	if len(b) != 68+8*3 {
		t.Fatalf("encoded %d bytes", len(b))
	}
	got, err := DecodeHeader(append(b, 1, 2, 3)) // trailing bytes are the payload's
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != h.ID || got.Gen != h.Gen || got.Epoch != h.Epoch || got.Rank != h.Rank || got.NumRanks != h.NumRanks ||
		got.PayloadCRC != h.PayloadCRC || got.LayoutCRC != h.LayoutCRC || !equalU64(got.Regions, h.Regions) || got.PayloadLen() != 4106 {
		t.Fatalf("decoded %+v, want %+v", got, h)
	}
	empty := Header{NumRanks: 1}
	if _, err := DecodeHeader(encodeHeader(t, empty)); err != nil {
		t.Fatalf("header with no regions: %v", err)
	}
	many := Header{NumRanks: 1, Regions: make([]uint64, MaxRegions+1)}
	if _, err := many.Encode(make([]byte, many.Len())); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("encoding %d regions: %v", MaxRegions+1, err)
	}
	if _, err := h.Encode(make([]byte, 10)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short buffer: %v", err)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// resign recomputes the header CRC after a field was changed on purpose,
// so that the check under test is the field's own.
func resign(b []byte) []byte {
	n := binary.LittleEndian.Uint32(b[12:])
	end := headerFixed + 8*int(n)
	if end+4 <= len(b) {
		binary.LittleEndian.PutUint32(b[end:], crc32c(b[:end]))
	}
	return b
}

func TestDecodeHeaderRefuses(t *testing.T) {
	le := binary.LittleEndian
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		field  string
		offset int
	}{
		{"short", func(b []byte) []byte { return b[:20] }, "length", 20},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic", 0},
		{"version", func(b []byte) []byte { le.PutUint16(b[4:], 2); return resign(b) }, "version", 4},
		{"flags", func(b []byte) []byte { le.PutUint16(b[6:], 1); return resign(b) }, "flags", 6},
		{"too many regions", func(b []byte) []byte { le.PutUint32(b[12:], MaxRegions+1); return b }, "regions", 12},
		{"header length", func(b []byte) []byte { le.PutUint32(b[8:], 99); return b }, "header length", 8},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "length", 91},
		{"header crc", func(b []byte) []byte { b[17]++; return b }, "header crc", 88},
		{"rank", func(b []byte) []byte { le.PutUint32(b[40:], 4); return resign(b) }, "rank", 40},
		{"no ranks", func(b []byte) []byte { le.PutUint32(b[44:], 0); return resign(b) }, "rank", 40},
		{"payload sum", func(b []byte) []byte { le.PutUint64(b[48:], 4107); return resign(b) }, "payload length", 48},
		{"region overflow", func(b []byte) []byte {
			le.PutUint64(b[64:], ^uint64(0))
			le.PutUint64(b[48:], 1<<40)
			return resign(b)
		}, "region length", 64},
		{"payload cap", func(b []byte) []byte { le.PutUint64(b[48:], 1<<41); return resign(b) }, "payload length", 48},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mutate(encodeHeader(t, sampleHeader()))
			_, err := DecodeHeader(b)
			var he *HeaderError
			if !errors.As(err, &he) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeHeader = %v, want a *HeaderError wrapping ErrCorrupt", err)
			}
			if he.Field != c.field || he.Offset != c.offset {
				t.Fatalf("refused at %s offset %d (%v), want %s offset %d", he.Field, he.Offset, err, c.field, c.offset)
			}
		})
	}
}

func TestLayoutCRC(t *testing.T) {
	if layoutCRC([]string{"ab", "c"}) == layoutCRC([]string{"a", "bc"}) {
		t.Fatal("name boundaries do not count")
	}
	if layoutCRC([]string{"a", "b"}) == layoutCRC([]string{"b", "a"}) {
		t.Fatal("order does not count")
	}
}

// FuzzDecodeHeader: DecodeHeader never panics, never accepts a header
// whose re-encoding differs from the input, and what it accepts obeys the
// invariants the rest of the package relies on.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(encodeHeader(f, sampleHeader()))
	f.Add(encodeHeader(f, Header{NumRanks: 1}))
	f.Add(encodeHeader(f, Header{NumRanks: 9, Rank: 8, Regions: make([]uint64, MaxRegions)}))
	f.Add([]byte("GCKP"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if len(h.Regions) > MaxRegions || h.Rank >= h.NumRanks || h.PayloadLen() > maxPayloadLen {
			t.Fatalf("accepted %+v", h)
		}
		re := encodeHeader(t, h)
		if !bytes.Equal(re, b[:len(re)]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:len(re)])
		}
	})
}
