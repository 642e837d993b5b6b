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
