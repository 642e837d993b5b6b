package kernel

import (
	"errors"
	"math"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

func TestGenerateRangesIndependent(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 77, N: 5000, D: 7, Blobs: 13, Spread: 5, Sigma: 0.5}
	all := make([]float64, g.N*g.D)
	if err := Generate(g, 0, g.N, all); err != nil {
		t.Fatal(err)
	}
	for _, cuts := range [][]int{{0, 1, g.N}, {0, 2500, g.N}, {0, 1234, 1235, 4000, g.N}, {0, g.N - 1, g.N}} {
		var cat []float64
		for i := 0; i+1 < len(cuts); i++ {
			part := make([]float64, (cuts[i+1]-cuts[i])*g.D)
			if err := Generate(g, cuts[i], cuts[i+1], part); err != nil {
				t.Fatal(err)
			}
			cat = append(cat, part...)
		}
		if i := kmtest.SameBits(all, cat); i != -1 {
			t.Fatalf("cuts %v: value %d differs from the one-piece data set", cuts, i)
		}
	}
	// Empty range is fine.
	if err := Generate(g, 10, 10, nil); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateSeedAndShape(t *testing.T) {
	t.Parallel()
	g := LocalGenConfig()
	a := make([]float64, 100*g.D)
	b := make([]float64, 100*g.D)
	if err := Generate(g, 0, 100, a); err != nil {
		t.Fatal(err)
	}
	if err := Generate(g, 0, 100, b); err != nil {
		t.Fatal(err)
	}
	if kmtest.SameBits(a, b) != -1 {
		t.Fatal("same config, different data")
	}
	g2 := g
	g2.Seed++
	if err := Generate(g2, 0, 100, b); err != nil {
		t.Fatal(err)
	}
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("another seed repeats %d values", same)
	}
	// A golden value pins the generator: a change here changes every data
	// set on disk and every recorded checksum.
	if got, want := Checksum(a), goldenGen; got != want {
		t.Fatalf("generator output changed: checksum %s, want %s", got, want)
	}
}

const goldenGen = "e5a1a67e4d1c89eaa162b7ec3a5617ace260c8113760392d8f37202b8bef8a05"

// TestGenerateStatistics: points scatter around their blob centre with
// standard deviation Sigma and every blob is used.
func TestGenerateStatistics(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 3, N: 40000, D: 4, Blobs: 8, Spread: 10, Sigma: 2}
	pts := make([]float64, g.N*g.D)
	if err := Generate(g, 0, g.N, pts); err != nil {
		t.Fatal(err)
	}
	centres, _ := g.Centres()
	for _, c := range centres {
		if c < -g.Spread || c > g.Spread {
			t.Fatalf("centre coordinate %v outside ±%v", c, g.Spread)
		}
	}
	counts := make([]int, g.Blobs)
	var sum, sum2 float64
	var maxAbs float64
	for i := 0; i < g.N; i++ {
		b := g.Blob(i)
		counts[b]++
		for t := 0; t < g.D; t++ {
			z := pts[i*g.D+t] - centres[b*g.D+t]
			sum += z
			sum2 += z * z
			maxAbs = math.Max(maxAbs, math.Abs(z))
		}
	}
	m := float64(g.N * g.D)
	mean, sd := sum/m, math.Sqrt(sum2/m-(sum/m)*(sum/m))
	if math.Abs(mean) > 0.05 || math.Abs(sd-g.Sigma) > 0.05 {
		t.Fatalf("noise mean %v, sd %v; want ≈0 and ≈%v", mean, sd, g.Sigma)
	}
	if maxAbs > 6*g.Sigma {
		t.Fatalf("noise reaches %v, beyond 6 sigma", maxAbs)
	}
	for b, c := range counts {
		if c < g.N/g.Blobs/2 {
			t.Fatalf("blob %d has only %d of %d points", b, c, g.N)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	good := LocalGenConfig()
	for _, mut := range []func(*GenConfig){
		func(g *GenConfig) { g.N = 0 },
		func(g *GenConfig) { g.D = 0 },
		func(g *GenConfig) { g.D = MaxDim + 1 },
		func(g *GenConfig) { g.Blobs = 0 },
		func(g *GenConfig) { g.Spread = math.Inf(1) },
		func(g *GenConfig) { g.Sigma = -1 },
		func(g *GenConfig) { g.Sigma = math.NaN() },
	} {
		g := good
		mut(&g)
		if err := g.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate = %v", g, err)
		}
		if err := Generate(g, 0, 1, make([]float64, g.D)); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Generate = %v", g, err)
		}
	}
	if err := Generate(good, 5, 4, nil); !errors.Is(err, ErrRange) {
		t.Errorf("inverted range: %v", err)
	}
	if err := Generate(good, 0, good.N+1, make([]float64, (good.N+1)*good.D)); !errors.Is(err, ErrRange) {
		t.Errorf("past the end: %v", err)
	}
	if err := Generate(good, 0, 2, make([]float64, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("short dst: %v", err)
	}
}
