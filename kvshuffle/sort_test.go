package kvshuffle

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// Rule (radix sort): radixSortEnts orders any index as a comparison sort
// by the whole key does: random keys, keys shorter than the 8-byte
// prefix, keys equal in their prefix and differing after it, many equal
// keys, and prefixes whose bytes are constant (skipped passes).
func TestRadixSortEnts(t *testing.T) {
	var tmp []ent
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		n := r.IntN(3000)
		var data []byte
		var es []ent
		for range n {
			var k []byte
			switch r.IntN(5) {
			case 0: // short
				k = []byte{byte(r.IntN(3)), byte(r.IntN(3))}[:r.IntN(3)]
			case 1: // a shared prefix, differing after it
				k = append([]byte("prefix!!"), byte(r.IntN(256)), byte(r.IntN(4)))
			case 2: // repeated
				k = []byte("same-key-10")
			default:
				k = make([]byte, 1+r.IntN(12))
				for i := range k {
					k[i] = byte(r.IntN(256))
				}
				if seed%2 == 0 {
					k[0] = 'x' // a constant first byte: a pass skipped
				}
			}
			start := len(data)
			data = AppendPair(data, k, []byte{byte(len(es))})
			var err error
			if es, err = indexRun(data[start:], es, start, "test"); err != nil {
				t.Fatal(err)
			}
		}
		want := slices.Clone(es)
		slices.SortStableFunc(want, func(x, y ent) int { return bytes.Compare(x.key(data), y.key(data)) })
		got := slices.Clone(es)
		radixSortEnts(data, got, &tmp)
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d entries, want %d", seed, len(got), len(want))
		}
		seen := make(map[uint32]bool, len(got))
		for i := range got {
			if !bytes.Equal(got[i].key(data), want[i].key(data)) {
				t.Fatalf("seed %d: entry %d has key %x, want %x", seed, i, got[i].key(data), want[i].key(data))
			}
			if seen[got[i].kstart] {
				t.Fatalf("seed %d: entry at %d twice", seed, got[i].kstart)
			}
			seen[got[i].kstart] = true
		}
	}
}

// Rule (block sort): sortBlock returns the block's pairs moved into key
// order, front to back with nothing in between, and an index of them in
// that order; the input block and index are left as they were. Keys of
// every length (empty too), values of every length, repeated keys, and a
// block reused for the next sort (recycle).
func TestSortBlock(t *testing.T) {
	var bs blockSorter
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 9))
		var data []byte
		for range 500 + r.IntN(5000) {
			k := make([]byte, r.IntN(14))
			for i := range k {
				k[i] = byte(r.IntN(4) * 60)
			}
			if r.IntN(4) == 0 {
				k = []byte("repeated")
			}
			data = AppendPair(data, k, bytes.Repeat([]byte{byte(r.IntN(256))}, r.IntN(130)))
		}
		es, err := indexRun(data, nil, 0, "test")
		if err != nil {
			t.Fatal(err)
		}
		data0, es0 := slices.Clone(data), slices.Clone(es)
		want := slices.Clone(es)
		slices.SortStableFunc(want, func(x, y ent) int { return bytes.Compare(x.key(data), y.key(data)) })
		out, oes := bs.sortBlock(data, es, 1<<16)
		if !bytes.Equal(data, data0) || !slices.Equal(es, es0) {
			t.Fatalf("seed %d: the input block or index changed", seed)
		}
		if len(out) != len(data) || len(oes) != len(es) {
			t.Fatalf("seed %d: %d bytes and %d entries, want %d and %d", seed, len(out), len(oes), len(data), len(es))
		}
		var seen []string
		prev := uint32(0)
		for i, e := range oes {
			k, v, n, err := DecodePair(out[prev:])
			if err != nil || prev+uint32(n) != e.end || !bytes.Equal(k, e.key(out)) || !bytes.Equal(v, e.value(out)) || e.pre != KeyPrefix(k) {
				t.Fatalf("seed %d: entry %d does not index the pair at %d (%v)", seed, i, prev, err)
			}
			if !bytes.Equal(k, want[i].key(data)) {
				t.Fatalf("seed %d: pair %d has key %x, want %x", seed, i, k, want[i].key(data))
			}
			seen = append(seen, string(k)+"\x00"+string(v))
			prev = e.end
		}
		var all []string
		DecodeRun(data, func(k, v []byte) error { all = append(all, string(k)+"\x00"+string(v)); return nil })
		slices.Sort(seen)
		slices.Sort(all)
		if !slices.Equal(seen, all) {
			t.Fatalf("seed %d: the sorted block holds other pairs than the input", seed)
		}
		bs.recycle(data, es)
	}
}
