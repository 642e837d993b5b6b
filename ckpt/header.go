package ckpt

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// Snapshot header, little-endian. Version 1:
//
//	off  size  field
//	  0     4  magic "GCKP"
//	  4     2  version (1)
//	  6     2  flags (0; anything else is refused)
//	  8     4  header length in bytes: 68 + 8*regions
//	 12     4  number of regions (at most MaxRegions)
//	 16     8  checkpoint id
//	 24     8  generation (timeline; see doc.go)
//	 32     8  membership epoch at Start
//	 40     4  rank
//	 44     4  number of ranks
//	 48     8  payload length (= sum of region lengths)
//	 56     4  CRC32C of the payload
//	 60     4  CRC32C of the region names (layout)
//	 64   8*n  region lengths
//	64+8n   4  CRC32C of bytes [0, 64+8n)
//
// The payload (the regions, concatenated in registration order) follows the
// header in a file; in memory slots it starts at a fixed offset.

// MaxRegions is the most regions a snapshot may have.
const MaxRegions = 256

// MaxHeaderLen is the longest header: MaxRegions regions.
const MaxHeaderLen = headerFixed + 8*MaxRegions + 4

// maxPayloadLen bounds a payload length read from a header (1 TiB).
const maxPayloadLen = 1 << 40

const (
	headerFixed   = 64
	headerVersion = 1
)

var headerMagic = [4]byte{'G', 'C', 'K', 'P'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Header describes one rank's snapshot of one checkpoint.
type Header struct {
	ID         uint64   // checkpoint id given to Start
	Gen        uint64   // timeline generation (bumped by every restore)
	Epoch      uint64   // membership epoch when Start ran
	Rank       uint32   // rank whose state this is
	NumRanks   uint32   // ranks in the job
	PayloadCRC uint32   // CRC32C (Castagnoli) of the payload
	LayoutCRC  uint32   // CRC32C of the region names, see layoutCRC
	Regions    []uint64 // region lengths in registration order
}

// Len returns the encoded length of h.
func (h *Header) Len() int { return headerFixed + 8*len(h.Regions) + 4 }

// PayloadLen returns the sum of the region lengths.
func (h *Header) PayloadLen() uint64 {
	var s uint64
	for _, n := range h.Regions {
		s += n
	}
	return s
}

// Encode writes h into b, which must hold h.Len() bytes, and returns the
// number of bytes written. It fails for more than MaxRegions regions or a
// b too short.
func (h *Header) Encode(b []byte) (int, error) {
	n := len(h.Regions)
	if n > MaxRegions {
		return 0, fmt.Errorf("ckpt: header: %d regions, at most %d: %w", n, MaxRegions, ErrTooLarge)
	}
	size := h.Len()
	if len(b) < size {
		return 0, fmt.Errorf("ckpt: header: buffer of %d bytes for a %d-byte header: %w", len(b), size, ErrInvalid)
	}
	le := binary.LittleEndian
	copy(b[0:4], headerMagic[:])
	le.PutUint16(b[4:], headerVersion)
	le.PutUint16(b[6:], 0)
	le.PutUint32(b[8:], uint32(size))
	le.PutUint32(b[12:], uint32(n))
	le.PutUint64(b[16:], h.ID)
	le.PutUint64(b[24:], h.Gen)
	le.PutUint64(b[32:], h.Epoch)
	le.PutUint32(b[40:], h.Rank)
	le.PutUint32(b[44:], h.NumRanks)
	le.PutUint64(b[48:], h.PayloadLen())
	le.PutUint32(b[56:], h.PayloadCRC)
	le.PutUint32(b[60:], h.LayoutCRC)
	for i, r := range h.Regions {
		le.PutUint64(b[headerFixed+8*i:], r)
	}
	end := headerFixed + 8*n
	le.PutUint32(b[end:], crc32c(b[:end]))
	return size, nil
}

// DecodeHeader parses the header at the start of b. It is strict: every
// field is checked (magic, version, zero flags, region count, declared
// length, header checksum, rank below the rank count, region lengths
// adding up to the payload length without overflow), and any violation is
// a *HeaderError wrapping ErrCorrupt that names the offset. It never
// allocates more than MaxRegions lengths.
func DecodeHeader(b []byte) (Header, error) {
	bad := func(off int, field, format string, args ...any) (Header, error) {
		return Header{}, &HeaderError{Offset: off, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	le := binary.LittleEndian
	if len(b) < headerFixed+4 {
		return bad(len(b), "length", "only %d bytes, a header has at least %d", len(b), headerFixed+4)
	}
	if [4]byte(b[0:4]) != headerMagic {
		return bad(0, "magic", "%q is not %q", b[0:4], headerMagic[:])
	}
	if v := le.Uint16(b[4:]); v != headerVersion {
		return bad(4, "version", "version %d, this build reads %d", v, headerVersion)
	}
	if f := le.Uint16(b[6:]); f != 0 {
		return bad(6, "flags", "flags %#x set, none are defined", f)
	}
	n := le.Uint32(b[12:])
	if n > MaxRegions {
		return bad(12, "regions", "%d regions, at most %d", n, MaxRegions)
	}
	want := headerFixed + 8*int(n) + 4
	if l := le.Uint32(b[8:]); l != uint32(want) {
		return bad(8, "header length", "declares %d bytes, %d regions need %d", l, n, want)
	}
	if len(b) < want {
		return bad(len(b), "length", "truncated: %d of %d header bytes", len(b), want)
	}
	end := want - 4
	if got, sum := le.Uint32(b[end:]), crc32c(b[:end]); got != sum {
		return bad(end, "header crc", "stored %#08x, computed %#08x", got, sum)
	}
	h := Header{
		ID:         le.Uint64(b[16:]),
		Gen:        le.Uint64(b[24:]),
		Epoch:      le.Uint64(b[32:]),
		Rank:       le.Uint32(b[40:]),
		NumRanks:   le.Uint32(b[44:]),
		PayloadCRC: le.Uint32(b[56:]),
		LayoutCRC:  le.Uint32(b[60:]),
	}
	if h.NumRanks == 0 || h.Rank >= h.NumRanks {
		return bad(40, "rank", "rank %d of %d ranks", h.Rank, h.NumRanks)
	}
	plen := le.Uint64(b[48:])
	if plen > maxPayloadLen {
		return bad(48, "payload length", "%d bytes, at most %d", plen, uint64(maxPayloadLen))
	}
	h.Regions = make([]uint64, n)
	var sum uint64
	for i := range h.Regions {
		r := le.Uint64(b[headerFixed+8*i:])
		var carry uint64
		sum, carry = bits.Add64(sum, r, 0)
		if carry != 0 || sum > plen {
			return bad(headerFixed+8*i, "region length", "region %d (%d bytes) runs past the payload length %d", i, r, plen)
		}
		h.Regions[i] = r
	}
	if sum != plen {
		return bad(48, "payload length", "%d bytes, regions add up to %d", plen, sum)
	}
	return h, nil
}

// layoutCRC is the CRC32C of the region names, each preceded by its
// length as a uvarint, so that a snapshot is never restored into regions
// registered under other names or in another order.
func layoutCRC(names []string) uint32 {
	var crc uint32
	var lb [binary.MaxVarintLen64]byte
	for _, n := range names {
		k := binary.PutUvarint(lb[:], uint64(len(n)))
		crc = crc32.Update(crc, castagnoli, lb[:k])
		crc = crc32.Update(crc, castagnoli, []byte(n))
	}
	return crc
}
