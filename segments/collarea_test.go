package segments

import (
	"testing"
	"unsafe"
)

// collMem returns aligned memory for an area of n members.
func collMem(n int) []byte {
	words := make([]uint64, CollAreaSize(n)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// Every word and block of an area lies inside it, apart from every
// other one, and a member's words share no cache line with another's.
func TestCollAreaLayout(t *testing.T) {
	for _, n := range []int{1, 2, 3, 64} {
		mem := collMem(n)
		a, err := NewCollArea(mem, n)
		if err != nil {
			t.Fatal(err)
		}
		base := uintptr(unsafe.Pointer(&mem[0]))
		type span struct {
			what     string
			from, to uintptr // offsets, to excluded
		}
		var spans []span
		add := func(what string, p unsafe.Pointer, size uintptr) {
			off := uintptr(p) - base
			if off%8 != 0 && size >= 8 || off+size > uintptr(len(mem)) {
				t.Fatalf("n=%d: %s at %d (+%d) misaligned or outside %d bytes", n, what, off, size, len(mem))
			}
			spans = append(spans, span{what, off, off + size})
		}
		for i := range n {
			add("stamp", unsafe.Pointer(a.Stamp(i)), 8)
			add("sleep", unsafe.Pointer(a.Sleep(i)), 4)
			if line := (uintptr(unsafe.Pointer(a.Stamp(i))) - base) / CollLine; line != uintptr(1+i) {
				t.Errorf("n=%d: member %d's stamp is in line %d, want %d", n, i, line, 1+i)
			}
			for k := range uint64(2) {
				add("size", unsafe.Pointer(a.Size(i, k)), 8)
				b := a.Block(i, k)
				if len(b) != CollBlock || cap(b) != CollBlock {
					t.Fatalf("n=%d: block %d/%d has len %d cap %d", n, i, k, len(b), cap(b))
				}
				add("block", unsafe.Pointer(&b[0]), CollBlock)
				if line := (uintptr(unsafe.Pointer(a.Size(i, k))) - base) / CollLine; line != uintptr(1+i) {
					t.Errorf("n=%d: member %d's size %d is in line %d, want %d", n, i, k, line, 1+i)
				}
			}
		}
		for x := range spans {
			for y := range x {
				if spans[x].from < spans[y].to && spans[y].from < spans[x].to {
					t.Errorf("n=%d: %s %v overlaps %s %v", n, spans[x].what, spans[x], spans[y].what, spans[y])
				}
			}
		}
	}
}

// Sizes and blocks are double-buffered by the stamp's parity: k and k+2
// share them, k and k+1 do not.
func TestCollAreaParity(t *testing.T) {
	a, err := NewCollArea(collMem(2), 2)
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(4) {
		if a.Size(1, k) != a.Size(1, k+2) || &a.Block(1, k)[0] != &a.Block(1, k+2)[0] {
			t.Errorf("collectives %d and %d use different words", k, k+2)
		}
		if a.Size(1, k) == a.Size(1, k+1) || &a.Block(1, k)[0] == &a.Block(1, k+1)[0] {
			t.Errorf("collectives %d and %d share words", k, k+1)
		}
	}
	a.Size(0, 3).Store(7)
	a.Stamp(0).Store(3)
	if got := a.Size(0, 1).Load(); got != 7 {
		t.Errorf("size of collective 1 = %d, want 7 (collective 3's)", got)
	}
}

func TestCollAreaTooSmall(t *testing.T) {
	mem := collMem(3)
	if _, err := NewCollArea(mem[:len(mem)-1], 3); err == nil {
		t.Error("an area one byte short was laid out")
	}
	if _, err := NewCollArea(mem[1:], 2); err == nil {
		t.Error("a misaligned area was laid out")
	}
	if _, err := NewCollArea(mem, 0); err == nil {
		t.Error("an area of no members was laid out")
	}
}
