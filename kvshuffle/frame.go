package kvshuffle

import (
	"encoding/binary"
	"math/bits"
)

// Pair framing. A framed pair is
//
//	uvarint(len(key)) uvarint(len(value)) key value
//
// with both lengths in canonical (shortest) unsigned LEB128 form, as
// encoding/binary writes them. A run is a concatenation of framed pairs
// with nothing in between; an empty run is zero bytes. The same framing is
// used in frames on the wire, in memory runs, in spill files and in
// checkpoint states. Keys and values are opaque bytes; the framing never
// copies them through an encoder.

// uvarintLen returns the encoded size of x.
func uvarintLen(x uint64) int {
	return (bits.Len64(x|1) + 6) / 7
}

// PairSize returns the framed size of a pair with the given key and value
// lengths.
func PairSize(keyLen, valueLen int) int {
	return uvarintLen(uint64(keyLen)) + uvarintLen(uint64(valueLen)) + keyLen + valueLen
}

// AppendPair appends the framed pair to dst and returns the extended slice.
func AppendPair(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, key...)
	return append(dst, value...)
}

// putPair writes the framed pair at the start of dst, which must hold
// PairSize bytes, and returns the number of bytes written.
func putPair(dst, key, value []byte) int {
	n := binary.PutUvarint(dst, uint64(len(key)))
	n += binary.PutUvarint(dst[n:], uint64(len(value)))
	n += copy(dst[n:], key)
	n += copy(dst[n:], value)
	return n
}

// readLen decodes one canonical length varint at b[off:], checking that
// the length fits in what follows.
func readLen(b []byte, off int, what string) (uint64, int, error) {
	x, n := binary.Uvarint(b[off:])
	switch {
	case n == 0:
		return 0, 0, corrupt(what, int64(off), "length varint cut short (%d bytes left)", len(b)-off)
	case n < 0:
		return 0, 0, corrupt(what, int64(off), "length varint overflows 64 bits")
	case n != uvarintLen(x):
		return 0, 0, corrupt(what, int64(off), "length varint not in shortest form (%d bytes for %d)", n, x)
	}
	return x, n, nil
}

// DecodePair decodes the framed pair at the start of b. It returns the key
// and value (aliasing b) and the number of bytes the pair took. It never
// reads beyond b and never allocates.
func DecodePair(b []byte) (key, value []byte, n int, err error) {
	return decodePairAt(b, 0, "pair")
}

func decodePairAt(b []byte, off int, what string) (key, value []byte, n int, err error) {
	start := off
	kl, n1, err := readLen(b, off, what)
	if err != nil {
		return nil, nil, 0, err
	}
	off += n1
	vl, n2, err := readLen(b, off, what)
	if err != nil {
		return nil, nil, 0, err
	}
	off += n2
	rest := uint64(len(b) - off)
	if kl > rest || vl > rest-kl {
		return nil, nil, 0, corrupt(what, int64(start), "pair claims %d+%d bytes, %d left", kl, vl, rest)
	}
	k := b[off : off+int(kl) : off+int(kl)]
	off += int(kl)
	v := b[off : off+int(vl) : off+int(vl)]
	off += int(vl)
	return k, v, off - start, nil
}

// DecodeRun checks that b is a whole number of framed pairs and calls fn
// (when not nil) for each, in order; key and value alias b. It stops at
// the first error from the framing (a *CorruptError) or from fn, and
// returns the number of pairs decoded before it.
func DecodeRun(b []byte, fn func(key, value []byte) error) (int, error) {
	count := 0
	for off := 0; off < len(b); {
		k, v, n, err := decodePairAt(b, off, "run")
		if err != nil {
			return count, err
		}
		if fn != nil {
			if err := fn(k, v); err != nil {
				return count, err
			}
		}
		off += n
		count++
	}
	return count, nil
}

// Frames. Every ring slot holds one frame: a 16-byte header and a payload.
//
//	0  kind     uint8   frameData, frameLarge, frameLargeLast, frameMarker, frameEnd
//	1  version  uint8   frameVersion
//	2  reserved uint16  zero
//	4  len      uint32  payload bytes, at most SlotSize-16
//	8  gen      uint32  shuffle generation (bumped by every RollBack)
//	12 seq      uint32  low 32 bits of the frame's number on its (sender, receiver) stream, from 1
//
// Payloads: frameData holds a run of whole pairs (not sorted); frameLarge
// and frameLargeLast hold consecutive pieces of one framed pair too large
// for a frame; frameMarker holds the checkpoint ID (8 bytes, little-endian);
// frameEnd is empty and ends the sender's stream.

const (
	frameHeader  = 16
	frameVersion = 1
)

type frameKind uint8

const (
	frameData frameKind = 1 + iota
	frameLarge
	frameLargeLast
	frameMarker
	frameEnd
)

type frameHdr struct {
	kind frameKind
	len  int
	gen  uint32
	seq  uint32
}

func putFrameHeader(b []byte, h frameHdr) {
	_ = b[frameHeader-1]
	b[0] = byte(h.kind)
	b[1] = frameVersion
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(h.len))
	binary.LittleEndian.PutUint32(b[8:], h.gen)
	binary.LittleEndian.PutUint32(b[12:], h.seq)
}

// decodeFrameHeader checks a frame header read from a ring slot of
// slotSize bytes.
func decodeFrameHeader(b []byte, slotSize int, what string) (frameHdr, error) {
	if len(b) < frameHeader {
		return frameHdr{}, corrupt(what, 0, "%d bytes, shorter than a frame header", len(b))
	}
	h := frameHdr{
		kind: frameKind(b[0]),
		len:  int(binary.LittleEndian.Uint32(b[4:])),
		gen:  binary.LittleEndian.Uint32(b[8:]),
		seq:  binary.LittleEndian.Uint32(b[12:]),
	}
	switch {
	case h.kind < frameData || h.kind > frameEnd:
		return h, corrupt(what, 0, "unknown frame kind %d", b[0])
	case b[1] != frameVersion:
		return h, corrupt(what, 1, "frame version %d, this build speaks %d", b[1], frameVersion)
	case b[2] != 0 || b[3] != 0:
		return h, corrupt(what, 2, "reserved bytes not zero")
	case h.len < 0 || h.len > slotSize-frameHeader:
		return h, corrupt(what, 4, "payload length %d above the slot's %d", h.len, slotSize-frameHeader)
	case h.kind == frameMarker && h.len != 8:
		return h, corrupt(what, 4, "marker payload of %d bytes, want 8", h.len)
	case h.kind == frameEnd && h.len != 0:
		return h, corrupt(what, 4, "end frame with %d payload bytes", h.len)
	case (h.kind == frameLarge || h.kind == frameLargeLast) && h.len == 0:
		return h, corrupt(what, 4, "empty piece of a large pair")
	}
	return h, nil
}

// Sequence numbers in notification values. A notification value must be
// non-zero to be seen, and pgas delivers it as a uint32 that overwrites the
// previous one; the shuffle sends cumulative counts, so the latest value is
// all a reader needs. The top bit is always set; the low 31 bits carry the
// count modulo 2^31, which is unambiguous because fewer than Slots frames
// are ever outstanding.

func encodeCount(n uint64) uint32 { return 0x8000_0000 | uint32(n&0x7fff_ffff) }

// extendCount returns the 64-bit count whose low 31 bits are v's and which
// lies in [base, base+2^31).
func extendCount(base uint64, v uint32) uint64 {
	return base + uint64((v-uint32(base))&0x7fff_ffff)
}
