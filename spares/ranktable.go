package spares

import (
	"encoding/binary"
	"iter"
	"unique"
)

// rankTable is state.Ranks: rank -> proc, noProc for a vacant rank. It is
// an immutable string interned by content (package unique), so the nodes
// of one process that hold the same table share one copy (a simulation of
// N nodes holds O(N), not O(N²)), copying a state copies a pointer, and
// no node can write a table another one reads: a change (with) builds
// another table. Equal tables are the same handle, so states compare
// with reflect.DeepEqual. Its zero value is an empty table.
type rankTable struct{ h unique.Handle[string] }

// newRankTable returns the table of ranks (not kept).
func newRankTable(ranks []uint32) rankTable {
	if len(ranks) == 0 {
		return rankTable{}
	}
	b := make([]byte, 4*len(ranks))
	for r, p := range ranks {
		binary.LittleEndian.PutUint32(b[4*r:], p)
	}
	return rankTable{h: unique.Make(string(b))}
}

func (t rankTable) str() string {
	if t.h == (unique.Handle[string]{}) {
		return ""
	}
	return t.h.Value()
}

// len is the number of ranks.
func (t rankTable) len() int { return len(t.str()) / 4 }

// at is rank r's process; r is in [0, len).
func (t rankTable) at(r int) uint32 {
	s := t.str()[4*r : 4*r+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// all yields every rank and its process in rank order.
func (t rankTable) all() iter.Seq2[int, uint32] {
	return func(yield func(int, uint32) bool) {
		for r := range t.len() {
			if !yield(r, t.at(r)) {
				return
			}
		}
	}
}

// slice returns the table as a new slice.
func (t rankTable) slice() []uint32 {
	out := make([]uint32, t.len())
	for r := range out {
		out[r] = t.at(r)
	}
	return out
}

// with returns the table with rank r held by p: O(N), a new table (the
// receiver, which other states may share, is not changed).
func (t rankTable) with(r int, p uint32) rankTable {
	s := t.slice()
	s[r] = p
	return newRankTable(s)
}
