package kernel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

func TestKernelImplsBitIdentical(t *testing.T) {
	t.Parallel()
	for _, d := range []int{1, 2, 3, 10, 33} {
		for _, k := range []int{1, 2, 7, 8, 9, 16, 17, 100, 300} {
			for _, n := range []int{0, 1, 3, 5, 6, 77, 1001} {
				seed := uint64(d*1_000_000 + k*1000 + n)
				pts := kmtest.RandPoints(seed, n, d)
				cent := kmtest.RandPoints(seed+1, k, d)
				ref := runStep(t, pts, d, cent, Config{Impl: ImplGo, Threads: 1})
				for _, impl := range fastImpls()[1:] {
					got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 1})
					requireIdentical(t, fmt.Sprintf("d=%d k=%d n=%d %v vs go", d, k, n, impl), ref, got)
				}
			}
		}
	}
	// High dimension: the smallest cache blocks (2 centroid blocks per
	// chunk, 4 points per block).
	const n, d, k = 45, 700, 21
	pts := kmtest.RandPoints(5, n, d)
	cent := kmtest.RandPoints(6, k, d)
	ref := runStep(t, pts, d, cent, Config{Impl: ImplGo, Threads: 1})
	for _, impl := range fastImpls()[1:] {
		got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 1})
		requireIdentical(t, fmt.Sprintf("d=%d k=%d n=%d %v vs go", d, k, n, impl), ref, got)
	}
}

// TestKernelVsNaive checks every fast kernel against direct distances with
// a tolerance: the chosen centroid must be as close as the naive choice up
// to the rounding of the norm expansion.
func TestKernelVsNaive(t *testing.T) {
	t.Parallel()
	for _, d := range []int{1, 2, 5, 10, 24} {
		for _, k := range []int{1, 3, 10, 64, 250} {
			for _, n := range []int{2, 9, 500} { // n < k included
				pts := kmtest.RandPoints(uint64(7*d+k+n), n, d)
				cent := kmtest.RandPoints(uint64(11*d+k+n), k, d)
				naive := runStep(t, pts, d, cent, Config{Impl: ImplNaive, Threads: 1})
				for _, impl := range fastImpls() {
					got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 1})
					for i := 0; i < n; i++ {
						x := pts[i*d : i*d+d]
						a, b := got.assign[i], naive.assign[i]
						if a < 0 || int(a) >= k {
							t.Fatalf("%v d=%d k=%d: point %d assigned to %d", impl, d, k, i, a)
						}
						da := sqDist(x, cent[int(a)*d:int(a)*d+d])
						db := sqDist(x, cent[int(b)*d:int(b)*d+d])
						scale := norm2(x) + norm2(cent[int(a)*d:int(a)*d+d]) + norm2(cent[int(b)*d:int(b)*d+d])
						if da > db+1e-12*scale {
							t.Fatalf("%v d=%d k=%d: point %d chose %d at %v, naive chose %d at %v",
								impl, d, k, i, a, da, b, db)
						}
					}
					if got.p.Changed != int64(n) {
						t.Fatalf("first step changed = %d, want %d", got.p.Changed, n)
					}
					var total int64
					for _, c := range got.p.Counts {
						total += c
					}
					if total != int64(n) {
						t.Fatalf("counts sum to %d, want %d", total, n)
					}
					if math.Abs(got.p.SSE-naive.p.SSE) > 1e-9*(1+naive.p.SSE) {
						t.Fatalf("%v d=%d k=%d n=%d: SSE %v, naive %v", impl, d, k, n, got.p.SSE, naive.p.SSE)
					}
				}
			}
		}
	}
}

// TestKernelWellSeparated: with blob centres as centroids and a small
// spread, every kernel (naive included) assigns every point to its blob.
func TestKernelWellSeparated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ d, blobs int }{{1, 3}, {2, 10}, {10, 10}, {10, 100}, {7, 300}} {
		g := GenConfig{Seed: 5, N: 3000, D: tc.d, Blobs: tc.blobs, Spread: 1000, Sigma: 1e-3}
		pts := make([]float64, g.N*g.D)
		if err := Generate(g, 0, g.N, pts); err != nil {
			t.Fatal(err)
		}
		centres, _ := g.Centres()
		for _, impl := range append([]Impl{ImplNaive}, fastImpls()...) {
			got := runStep(t, pts, g.D, centres, Config{Impl: impl, Threads: 1})
			for i, a := range got.assign {
				if int(a) != g.Blob(i) {
					t.Fatalf("%v d=%d blobs=%d: point %d assigned to %d, its blob is %d", impl, tc.d, tc.blobs, i, a, g.Blob(i))
				}
			}
		}
	}
}

// TestKernelSumsExact uses small integers, for which every sum and distance
// is exact, so sums, counts and SSE must equal a naive recount exactly.
func TestKernelSumsExact(t *testing.T) {
	t.Parallel()
	const n, d, k = 20000, 6, 13
	pts := kmtest.RandPoints(3, n, d)
	for i := range pts {
		pts[i] = math.Round(pts[i] * 20)
	}
	cent := kmtest.RandPoints(4, k, d)
	for i := range cent {
		cent[i] = math.Round(cent[i] * 20)
	}
	for _, impl := range append([]Impl{ImplNaive}, fastImpls()...) {
		got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 2})
		sums := make([]float64, k*d)
		counts := make([]int64, k)
		sse := 0.0
		for i := 0; i < n; i++ {
			a := int(got.assign[i])
			counts[a]++
			for t := 0; t < d; t++ {
				sums[a*d+t] += pts[i*d+t]
			}
			sse += sqDist(pts[i*d:i*d+d], cent[a*d:a*d+d])
		}
		if i := kmtest.SameBits(sums, got.p.Sums); i != -1 {
			t.Fatalf("%v: sums[%d] = %v, want %v", impl, i, got.p.Sums[i], sums[i])
		}
		for j := range counts {
			if counts[j] != got.p.Counts[j] {
				t.Fatalf("%v: counts[%d] = %d, want %d", impl, j, got.p.Counts[j], counts[j])
			}
		}
		if sse != got.p.SSE {
			t.Fatalf("%v: SSE = %v, want %v", impl, got.p.SSE, sse)
		}
	}
}

// TestKernelTiesLowestIndex duplicates centroid 3 at indices in the same and
// other lanes, even and odd blocks and other L1 chunks; no point may ever
// pick a later copy.
func TestKernelTiesLowestIndex(t *testing.T) {
	t.Parallel()
	const n, d, k = 997, 10, 400 // chunkBlocks for d=10 is 24 blocks = 192 centroids
	pts := kmtest.RandPoints(21, n, d)
	cent := kmtest.RandPoints(22, k, d)
	for i := range cent {
		cent[i] *= 3 // push the others away so centroid 3 wins often
	}
	clear(cent[3*d : 4*d]) // centroid 3 (and its copies) at the origin
	dups := []int{5, 7, 11, 19, 27, 100, 191, 192, 195, 203, 250, 399}
	for _, j := range dups {
		copy(cent[j*d:j*d+d], cent[3*d:3*d+d])
	}
	for _, impl := range append([]Impl{ImplNaive}, fastImpls()...) {
		got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 1})
		won := 0
		for i, a := range got.assign {
			if slices.Contains(dups, int(a)) {
				t.Fatalf("%v: point %d went to duplicate %d of centroid 3", impl, i, a)
			}
			if a == 3 {
				won++
			}
		}
		if won < n/10 {
			t.Fatalf("%v: centroid 3 won only %d points; the test does not exercise ties", impl, won)
		}
	}
}

// TestKernelDeterministicAcrossThreads: several accumulation chunks, any
// number of threads, repeated runs: the same bits.
func TestKernelDeterministicAcrossThreads(t *testing.T) {
	t.Parallel()
	const n, d, k = 41000, 5, 37 // 6 accumulation chunks
	pts := kmtest.RandPoints(31, n, d)
	cent := kmtest.RandPoints(32, k, d)
	for _, impl := range fastImpls() {
		ref := runStep(t, pts, d, cent, Config{Impl: impl, Threads: 1})
		for _, threads := range []int{1, 2, 3, 8, 100} {
			got := runStep(t, pts, d, cent, Config{Impl: impl, Threads: threads})
			requireIdentical(t, fmt.Sprintf("%v threads=%d", impl, threads), ref, got)
		}
	}
}

func TestKernelChangedAndAssignments(t *testing.T) {
	t.Parallel()
	const n, d, k = 500, 3, 4
	pts := kmtest.RandPoints(41, n, d)
	cent := kmtest.RandPoints(42, k, d)
	kr, err := NewKernel(pts, d, k, Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if a := kr.Assignments(); a[0] != -1 || len(a) != n {
		t.Fatalf("before the first step: assignment %d, len %d", a[0], len(a))
	}
	p := NewPartial(k, d)
	if err := kr.Step(cent, p); err != nil {
		t.Fatal(err)
	}
	if p.Changed != n {
		t.Fatalf("first step changed %d, want %d", p.Changed, n)
	}
	if err := kr.Step(cent, p); err != nil {
		t.Fatal(err)
	}
	if p.Changed != 0 {
		t.Fatalf("same centroids again changed %d, want 0", p.Changed)
	}
	saved := append([]int32(nil), kr.Assignments()...)
	flip := append([]int32(nil), saved...)
	flip[7] = (flip[7] + 1) % k
	flip[8] = -1
	if err := kr.SetAssignments(flip); err != nil {
		t.Fatal(err)
	}
	if err := kr.Step(cent, p); err != nil {
		t.Fatal(err)
	}
	if p.Changed != 2 {
		t.Fatalf("after changing two remembered assignments changed = %d, want 2", p.Changed)
	}
	if err := kr.SetAssignments(flip[:3]); !errors.Is(err, ErrShape) {
		t.Fatalf("short SetAssignments: %v", err)
	}
	flip[0] = k
	if err := kr.SetAssignments(flip); !errors.Is(err, ErrShape) {
		t.Fatalf("out-of-range SetAssignments: %v", err)
	}
}

// TestKernelNoAllocs is not parallel: AllocsPerRun counts every goroutine's
// allocations.
func TestKernelNoAllocs(t *testing.T) {
	const n, d, k = 20000, 10, 20 // 3 accumulation chunks
	pts := kmtest.RandPoints(51, n, d)
	cent := kmtest.RandPoints(52, k, d)
	for _, impl := range append([]Impl{ImplNaive}, fastImpls()...) {
		for _, threads := range []int{1, 2} {
			kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			p := NewPartial(k, d)
			allocs := testing.AllocsPerRun(5, func() {
				if err := kr.Step(cent, p); err != nil {
					t.Fatal(err)
				}
			})
			kr.Close()
			if allocs != 0 {
				t.Fatalf("%v threads=%d: Step allocates %v times", impl, threads, allocs)
			}
		}
	}
}

func TestKernelErrors(t *testing.T) {
	t.Parallel()
	pts := kmtest.RandPoints(61, 10, 3)
	if _, err := NewKernel(pts, 4, 2, Config{}); !errors.Is(err, ErrShape) {
		t.Errorf("len not a multiple of d: %v", err)
	}
	if _, err := NewKernel(pts, 0, 2, Config{}); !errors.Is(err, ErrShape) {
		t.Errorf("d = 0: %v", err)
	}
	if _, err := NewKernel(pts, 3, 0, Config{}); !errors.Is(err, ErrShape) {
		t.Errorf("k = 0: %v", err)
	}
	if _, err := NewKernel(pts, 3, 2, Config{Threads: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("threads = -1: %v", err)
	}
	bad := append([]float64(nil), pts...)
	bad[7] = math.NaN()
	if _, err := NewKernel(bad, 3, 2, Config{}); !errors.Is(err, ErrNotFinite) {
		t.Errorf("NaN point: %v", err)
	} else if want := "point 2 dimension 1"; !strings.Contains(err.Error(), want) {
		t.Errorf("NaN point error %q does not say %q", err, want)
	}
	kr, err := NewKernel(pts, 3, 2, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPartial(2, 3)
	if err := kr.Step(make([]float64, 5), p); !errors.Is(err, ErrShape) {
		t.Errorf("short centroids: %v", err)
	}
	if err := kr.Step(make([]float64, 6), NewPartial(3, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("wrong partial: %v", err)
	}
	c := []float64{0, 0, 0, 1, math.Inf(-1), 1}
	if err := kr.Step(c, p); !errors.Is(err, ErrNotFinite) {
		t.Errorf("Inf centroid: %v", err)
	}
	kr.Close()
	kr.Close()
	if err := kr.Step(make([]float64, 6), p); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestUpdateEmptyClusterKeepsCentroid(t *testing.T) {
	t.Parallel()
	prev := []float64{1, 2, 3, 4, 5, 6}
	sums := []float64{10, 20, 0, 0, 3, 3}
	counts := []int64{10, 0, 3}
	dst := make([]float64, 6)
	shift, err := Update(dst, prev, sums, counts, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 2, 3, 4, 1, 1}
	if kmtest.SameBits(dst, want) != -1 {
		t.Fatalf("Update = %v, want %v", dst, want)
	}
	if w := math.Sqrt(16 + 25); shift != w {
		t.Fatalf("shift = %v, want %v", shift, w)
	}
	// In place.
	if _, err := Update(prev, prev, sums, counts, 3, 2); err != nil || kmtest.SameBits(prev, want) != -1 {
		t.Fatalf("in-place Update = %v, %v", prev, err)
	}
	if _, err := Update(dst, prev, sums, counts[:2], 3, 2); !errors.Is(err, ErrShape) {
		t.Fatalf("short counts: %v", err)
	}
}

func TestPartialAdd(t *testing.T) {
	t.Parallel()
	a, b := NewPartial(2, 2), NewPartial(2, 2)
	b.Sums[3], b.Counts[1], b.SSE, b.Changed = 1.5, 2, 3, 4
	if err := a.Add(b); err != nil {
		t.Fatal(err)
	}
	if a.Sums[3] != 1.5 || a.Counts[1] != 2 || a.SSE != 3 || a.Changed != 4 {
		t.Fatalf("Add: %+v", a)
	}
	if err := a.Add(NewPartial(3, 2)); !errors.Is(err, ErrShape) {
		t.Fatalf("mismatched Add: %v", err)
	}
	a.Reset()
	if a.Sums[3] != 0 || a.Counts[1] != 0 || a.SSE != 0 || a.Changed != 0 {
		t.Fatalf("Reset: %+v", a)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{DefaultConfig(), LocalConfig()} {
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	bad := []Config{
		{Impl: Impl(42), Threads: 1, MaxIter: 1},
		{Threads: 0, MaxIter: 1},
		{Threads: MaxThreads + 1, MaxIter: 1},
		{Threads: 1, MaxIter: 0},
		{Threads: 1, MaxIter: 1, Tol: -1},
		{Threads: 1, MaxIter: 1, Tol: math.NaN()},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate = %v", c, err)
		}
	}
	for _, i := range []Impl{ImplAuto, ImplNaive, ImplGo, ImplAVX2, ImplAVX512} {
		got, err := ParseImpl(i.String())
		if err != nil || got != i {
			t.Errorf("ParseImpl(%q) = %v, %v", i.String(), got, err)
		}
	}
	if _, err := ParseImpl("sse9"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseImpl(sse9): %v", err)
	}
	if !Available(Best()) || Best() == ImplAuto {
		t.Errorf("Best() = %v", Best())
	}
	for _, i := range []Impl{ImplAVX2, ImplAVX512} {
		if !Available(i) {
			c := DefaultConfig()
			c.Impl = i
			if err := c.Validate(); !errors.Is(err, ErrConfig) {
				t.Errorf("unavailable %v accepted: %v", i, err)
			}
		}
	}
	t.Logf("best kernel here: %v", Best())
}
