package segments

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A collective area is the memory of one group's collectives on one host
// (package pgas, docs/design.md §9.3.1): a memfd of the group's lowest
// member, which the other members map (MapFD). It is laid out in lines
// of CollLine bytes, so that no two members store into one cache line:
//
//	line 0       unused
//	line 1+i     member i: its stamp (uint64, offset 0), its sleep word
//	             (uint32, offset 8), then the size it passed to the
//	             collective of an even stamp (uint64, offset 16) and of
//	             an odd one (uint64, offset 24)
//	then         two blocks of CollBlock bytes per member, by the
//	             stamp's parity: member i's are 2i (even) and 2i+1 (odd)
//
// Blocks and sizes are double-buffered by the stamp's parity: a member
// writes them for collective k+2 only after it saw every stamp of k+1,
// and a member stamps k+1 only after it read everything of k, so nothing
// is overwritten while someone reads it. The words are atomics: a member
// stores its block and size, then its stamp; the others load the stamp,
// then the size and the block.
const (
	CollBlock = 4 << 10 // bytes of each member's block: larger vectors go by frames
	CollLine  = 64      // bytes of a member's line
)

// CollAreaSize is the size of an area of n members.
func CollAreaSize(n int) int64 {
	return int64(CollLine*(1+n) + 2*CollBlock*n)
}

// CollArea is a view of a collective area's memory as its layout: the
// words and blocks of each member. It holds no state of its own.
type CollArea struct {
	mem []byte
	n   int
}

// NewCollArea lays out an area of n members over mem, which must hold
// CollAreaSize(n) bytes and be aligned for 8-byte atomics (a mapping is).
func NewCollArea(mem []byte, n int) (CollArea, error) {
	if n < 1 || int64(len(mem)) < CollAreaSize(n) {
		return CollArea{}, fmt.Errorf("segments: a collective area of %d members needs %d bytes, has %d", n, CollAreaSize(n), len(mem))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return CollArea{}, fmt.Errorf("segments: a collective area must be 8-byte aligned")
	}
	return CollArea{mem: mem, n: n}, nil
}

// Members returns the number of members.
func (a CollArea) Members() int { return a.n }

// Bytes returns the area's memory.
func (a CollArea) Bytes() []byte { return a.mem }

func (a CollArea) line(i int) int { return CollLine * (1 + i) }

// Stamp is member i's stamp: the count of the group's collectives it
// wrote its block and size for.
func (a CollArea) Stamp(i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[a.line(i)]))
}

// Sleep is member i's sleep word: non-zero while it is parked (or about
// to), waiting for a stamp.
func (a CollArea) Sleep(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.mem[a.line(i)+8]))
}

// Size is where member i writes the bytes it passed to collective k.
func (a CollArea) Size(i int, k uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[a.line(i)+16+8*int(k&1)]))
}

// Block is member i's block for the collective stamped k.
func (a CollArea) Block(i int, k uint64) []byte {
	off := CollLine*(1+a.n) + CollBlock*(2*i+int(k&1))
	return a.mem[off : off+CollBlock : off+CollBlock]
}
