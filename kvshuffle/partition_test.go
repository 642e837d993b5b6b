package kvshuffle

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
)

func randKey(r *rand.Rand) []byte {
	k := make([]byte, r.IntN(12))
	for i := range k {
		k[i] = byte(r.IntN(4) + 'a') // few symbols: many shared prefixes and duplicates
	}
	return k
}

// HashPartition against the standard library's FNV-1a, and its spread.
func TestHashPartition(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, parts := range []int{1, 2, 3, 7, 64, 1000} {
		counts := make([]int, parts)
		const n = 20000
		for range n {
			k := make([]byte, 8+r.IntN(8))
			for i := range k {
				k[i] = byte(r.Uint32())
			}
			h := fnv.New64a()
			h.Write(k)
			want := int(h.Sum64() % uint64(parts))
			got := HashPartition(k, parts)
			if got != want {
				t.Fatalf("HashPartition(%x, %d) = %d, reference %d", k, parts, got, want)
			}
			counts[got]++
		}
		if parts <= 64 {
			for p, c := range counts {
				if exp := n / parts; c < exp/2 || c > exp*3/2 {
					t.Errorf("parts=%d: partition %d got %d of %d keys", parts, p, c, n)
				}
			}
		}
	}
}

// RangePartitioner against a linear scan, on sorted splitters with
// duplicates; and it is monotone in the key.
func TestRangePartitioner(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		sp := make([][]byte, r.IntN(6))
		for i := range sp {
			sp[i] = randKey(r)
		}
		slices.SortFunc(sp, bytes.Compare)
		parts := len(sp) + 1
		part := RangePartitioner(sp)
		keys := make([][]byte, 50)
		for i := range keys {
			keys[i] = randKey(r)
			if i < len(sp) && r.IntN(2) == 0 {
				keys[i] = sp[i] // exactly on a splitter
			}
		}
		for _, k := range keys {
			want := 0
			for _, s := range sp {
				if bytes.Compare(s, k) <= 0 {
					want++
				}
			}
			if got := part(k, parts); got != want {
				t.Fatalf("splitters %q: key %q in partition %d, reference %d", sp, k, got, want)
			}
		}
		slices.SortFunc(keys, bytes.Compare)
		for i := 1; i < len(keys); i++ {
			if part(keys[i-1], parts) > part(keys[i], parts) {
				t.Fatalf("not monotone: %q -> %d, %q -> %d", keys[i-1], part(keys[i-1], parts), keys[i], part(keys[i], parts))
			}
		}
	}
}

// Every rank gets the same splitters, the quantiles of the union.
func TestSampleSplitters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 2)
		samples := make([][][]byte, n)
		var all [][]byte
		for i := range samples {
			r := rand.New(rand.NewPCG(9, uint64(i)))
			for range 10 * (i + 1) {
				k := randKey(r)
				samples[i] = append(samples[i], k)
				all = append(all, k)
			}
		}
		slices.SortFunc(all, bytes.Compare)
		got := make([][][]byte, n)
		each(t, n, func(i int) error {
			var err error
			got[i], err = SampleSplitters(context.Background(), rts[i], samples[i], 4, nil)
			return err
		})
		for i := range n {
			if len(got[i]) != 3 {
				t.Fatalf("rank %d: %d splitters, want 3", i, len(got[i]))
			}
			for j, s := range got[i] {
				if want := all[(j+1)*len(all)/4]; !bytes.Equal(s, want) {
					t.Fatalf("rank %d splitter %d = %q, want %q", i, j, s, want)
				}
			}
		}
		// No samples anywhere: empty splitters, still parts-1 of them.
		each(t, n, func(i int) error {
			sp, err := SampleSplitters(context.Background(), rts[i], nil, 3, nil)
			if err == nil && len(sp) != 2 {
				return fmt.Errorf("%d splitters from empty samples, want 2", len(sp))
			}
			return err
		})
	})
}
