package kmeans

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestCentroidsRoundTripAndChecksum(t *testing.T) {
	t.Parallel()
	const k, d = 4, 3
	c := append(append([]float64(nil), awkward[:9]...), 1.5, -7, 1e100)
	var b bytes.Buffer
	if err := WriteCentroidsCSV(&b, c, k, d); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != k {
		t.Fatalf("%d lines, want %d", lines, k)
	}
	path := writeTemp(t, "c.csv", b.Bytes())
	got, err := ReadCentroidsCSV(path, k, d)
	if err != nil {
		t.Fatal(err)
	}
	if sameBits(got, c) != -1 {
		t.Fatalf("round trip changed the bits: %v vs %v", got, c)
	}
	if Checksum(got) != Checksum(c) {
		t.Fatal("checksum differs after an exact round trip")
	}
	// The checksum sees every bit: -0 vs +0 and one ulp.
	z := append([]float64(nil), c...)
	z[1] = 0 // was -0
	if Checksum(z) == Checksum(c) {
		t.Fatal("checksum ignores the sign of zero")
	}
	z = append([]float64(nil), c...)
	z[0] = math.Nextafter(z[0], 1)
	if Checksum(z) == Checksum(c) {
		t.Fatal("checksum ignores one ulp")
	}
	// Known layout: SHA-256 of the 8 little-endian bytes of 1.0.
	if got, want := Checksum([]float64{1}), sha256Hex([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}); got != want {
		t.Fatalf("Checksum([1]) = %s, want %s", got, want)
	}
	if err := WriteCentroidsCSV(&b, c[:5], k, d); !errors.Is(err, ErrShape) {
		t.Fatalf("short centroids: %v", err)
	}
}

func TestReadCentroidsErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		err       error
		want      []string
	}{
		{"too few", "1,2\n3,4\n", ErrCount, []string{"holds 2 centroids, want k = 3"}},
		{"too many", "1,2\n3,4\n5,6\n\n7,8\n", ErrCount, []string{":5:", "more than k = 3"}},
		{"wrong d", "1,2\n3,4,5\n5,6\n", ErrColumns, []string{":2:", "got 3 values, want 2"}},
		{"nan", "1,2\n3,nan\n5,6\n", ErrNotFinite, []string{":2:", "column 2"}},
		{"word", "1,2\n3,4\nfive,6\n", ErrSyntax, []string{":3:", `"five"`}},
	}
	for _, tc := range cases {
		path := writeTemp(t, "c.csv", []byte(tc.src))
		_, err := ReadCentroidsCSV(path, 3, 2)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: message %q lacks %q or the path", tc.name, err, w)
			}
		}
	}
	if _, err := ReadCentroidsCSV("x", 0, 2); !errors.Is(err, ErrShape) {
		t.Errorf("k = 0: %v", err)
	}
}

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
		if total != k || sameBits(got, want) != -1 {
			t.Fatalf("%d ranks: filled %d rows, same=%v", ranks, total, sameBits(got, want) == -1)
		}
	}
}
