package kernel

import (
	"errors"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

func TestInitIndices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, k int }{{1, 1}, {10, 10}, {1000, 1}, {1000, 999}, {1_000_000, 1000}} {
		idx, err := InitIndices(7, tc.n, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) != tc.k {
			t.Fatalf("n=%d k=%d: %d indices", tc.n, tc.k, len(idx))
		}
		seen := map[int]bool{}
		for _, i := range idx {
			if i < 0 || i >= tc.n || seen[i] {
				t.Fatalf("n=%d k=%d: index %d out of range or repeated", tc.n, tc.k, i)
			}
			seen[i] = true
		}
		again, _ := InitIndices(7, tc.n, tc.k)
		if !slices.Equal(idx, again) {
			t.Fatal("not deterministic")
		}
	}
	a, _ := InitIndices(1, 1000, 10)
	b, _ := InitIndices(2, 1000, 10)
	if slices.Equal(a, b) {
		t.Fatal("seed has no effect")
	}
	if _, err := InitIndices(1, 5, 6); !errors.Is(err, ErrCount) {
		t.Fatalf("k > n: %v", err)
	}
}

// TestInitFromShardsIndependentOfSharding: filling the centroids shard by
// shard (as ranks do) gives the single-process choice for any sharding.
func TestInitFromShardsIndependentOfSharding(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 4, N: 2000, D: 3, Blobs: 5, Spread: 5, Sigma: 1}
	all := make([]float64, g.N*g.D)
	if err := Generate(g, 0, g.N, all); err != nil {
		t.Fatal(err)
	}
	const k = 50
	want, err := InitCentroids(all, g.D, k, 99)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := InitIndices(99, g.N, k)
	for _, ranks := range []int{1, 3, 7, 16} {
		got := make([]float64, k*g.D)
		total := 0
		for r := 0; r < ranks; r++ {
			lo, hi := r*g.N/ranks, (r+1)*g.N/ranks
			shard := make([]float64, (hi-lo)*g.D)
			if err := Generate(g, lo, hi, shard); err != nil {
				t.Fatal(err)
			}
			part := make([]float64, k*g.D)
			n, err := FillFromShard(part, idx, shard, lo, g.D)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			for j, gi := range idx { // "gather": the owner's rows
				if gi >= lo && gi < hi {
					copy(got[j*g.D:(j+1)*g.D], part[j*g.D:(j+1)*g.D])
				}
			}
		}
		if total != k || kmtest.SameBits(got, want) != -1 {
			t.Fatalf("%d ranks: filled %d rows, same=%v", ranks, total, kmtest.SameBits(got, want) == -1)
		}
	}
}
