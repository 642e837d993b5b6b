package kernel

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

var prunedAlgos = []Algo{AlgoHamerly, AlgoYinyang}

// lockstep runs a brute-force and a pruned kernel over the same points
// from the same starting centroids for iters iterations, requiring the
// same assignments, sums, counts, SSE and changed count at every step
// (the centroids then stay identical by construction). It returns the
// pruned kernel's totals.
func lockstep(t *testing.T, what string, pts []float64, d int, init []float64, iters int, cfg Config) PruneStats {
	t.Helper()
	k := len(init) / d
	bf := cfg
	bf.Algo = AlgoLloyd
	pc := cfg
	if pc.Algo == AlgoLloyd {
		pc.Algo = AlgoHamerly
	}
	kb, err := NewKernel(pts, d, k, bf)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	kp, err := NewKernel(pts, d, k, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Close()
	pb, pp := NewPartial(k, d), NewPartial(k, d)
	cent := append([]float64(nil), init...)
	var tot PruneStats
	for it := 1; it <= iters; it++ {
		if err := kb.Step(cent, pb); err != nil {
			t.Fatal(err)
		}
		if err := kp.Step(cent, pp); err != nil {
			t.Fatal(err)
		}
		requireIdentical(t, fmt.Sprintf("%s iteration %d", what, it),
			stepOut{kb.Assignments(), pb}, stepOut{kp.Assignments(), pp})
		st := kp.PruneStats()
		if st.Skipped+st.Tightened+st.Grouped+st.Scanned != int64(kp.N()) {
			t.Fatalf("%s: stats %+v do not add up to %d points", what, st, kp.N())
		}
		tot = tot.Add(st)
		if _, err := Update(cent, cent, pb.Sums, pb.Counts, k, d); err != nil {
			t.Fatal(err)
		}
	}
	return tot
}

// TestHamerlyBitIdentical: on blob data, uniform data and normal data, for
// every kernel implementation and thread count, the pruned kernel matches
// brute force bit for bit at every iteration, and it does prune.
func TestHamerlyBitIdentical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pts  []float64
		d, k int
	}{
		{"blobs d=10 k=200", genData(t, GenConfig{Seed: 15, N: 6000, D: 10, Blobs: 10, Spread: 10, Sigma: 1}), 10, 200},
		{"blobs d=10 k=60", genData(t, GenConfig{Seed: 11, N: 12000, D: 10, Blobs: 10, Spread: 10, Sigma: 1}), 10, 60},
		{"overlap d=3 k=37", genData(t, GenConfig{Seed: 12, N: 20000, D: 3, Blobs: 5, Spread: 2, Sigma: 1}), 3, 37}, // 3 accumulation chunks
		{"normal d=17 k=9", kmtest.RandPoints(13, 5000, 17), 17, 9},
		{"normal d=1 k=5", kmtest.RandPoints(14, 3000, 1), 1, 5},
	} {
		init, err := InitCentroids(tc.pts, tc.d, tc.k, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, algo := range prunedAlgos {
			for _, impl := range fastImpls() {
				threads := []int{1}
				if impl == Best() {
					threads = append(threads, 3) // several chunks at once
				}
				for _, threads := range threads {
					st := lockstep(t, fmt.Sprintf("%s %v %v threads=%d", tc.name, algo, impl, threads), tc.pts, tc.d, init, 8, Config{Impl: impl, Threads: threads, Algo: algo})
					if st.Skipped+st.Tightened == 0 || (algo == AlgoYinyang && tc.k >= 2*groupSize && st.Grouped == 0) {
						t.Fatalf("%s %v %v: nothing pruned: %+v", tc.name, algo, impl, st)
					}
				}
			}
		}
	}
}

// TestHamerlyAdversarial: exact ties (integer grids, duplicated points and
// centroids), clusters that collapse onto one another, data far from the
// origin (large rounding margin) and tiny data (underflow).
func TestHamerlyAdversarial(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	grid := func(n, d, side int) []float64 {
		p := make([]float64, n*d)
		for i := range p {
			p[i] = float64(r.IntN(side))
		}
		return p
	}
	scaled := func(p []float64, f, off float64) []float64 {
		q := make([]float64, len(p))
		for i, v := range p {
			q[i] = v*f + off
		}
		return q
	}
	dupCentroids := func(p []float64, d, k int) []float64 {
		c, _ := InitCentroids(p, d, k, 9)
		for j := 1; j < k; j += 3 { // every third centroid duplicates its neighbour
			copy(c[j*d:j*d+d], c[(j-1)*d:j*d])
		}
		return c
	}
	base := kmtest.RandPoints(7, 4000, 4)
	dupPts := make([]float64, 0, 6000*3)
	for i := 0; i < 6000; i++ {
		v := float64(i % 7)
		dupPts = append(dupPts, v, -v, 0.5*v)
	}
	for _, tc := range []struct {
		name string
		pts  []float64
		d    int
		init []float64
	}{
		{"grid ties", grid(8000, 2, 5), 2, nil},
		{"grid ties dup centroids", grid(8000, 3, 4), 3, dupCentroids(grid(8000, 3, 4), 3, 24)},
		{"duplicate points", dupPts, 3, nil},
		{"far from origin", scaled(base, 1, 1e6), 4, nil},
		{"huge scale", scaled(base, 1e150, 0), 4, nil},
		{"tiny scale", scaled(base, 1e-160, 0), 4, nil},
		{"collapsing", base, 4, dupCentroids(base, 4, 40)},
	} {
		init := tc.init
		if init == nil {
			var err error
			if init, err = InitCentroids(tc.pts, tc.d, 48, 2); err != nil {
				t.Fatal(err)
			}
		}
		for _, algo := range prunedAlgos {
			for _, impl := range fastImpls() {
				lockstep(t, fmt.Sprintf("%s %v %v", tc.name, algo, impl), tc.pts, tc.d, init, 10, Config{Impl: impl, Threads: 2, Algo: algo})
			}
		}
	}
}

// TestTop2: the full scan of the pruned kernel finds the brute-force
// winner, its value and the smallest other value, for every sub-group
// layout (k around multiples of the lanes and sub-groups).
func TestTop2(t *testing.T) {
	t.Parallel()
	for _, k := range []int{1, 2, 7, 8, 9, 63, 64, 65, 130, 257} {
		for _, d := range []int{1, 3, 10} {
			pts := kmtest.RandPoints(uint64(k*100+d), 50, d)
			cent := kmtest.RandPoints(uint64(k*100+d+1), k, d)
			if k > 4 { // a duplicate, so that exact ties occur
				copy(cent[4*d:5*d], cent[2*d:3*d])
			}
			for _, impl := range fastImpls() {
				kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 1, Algo: AlgoHamerly})
				if err != nil {
					t.Fatal(err)
				}
				kr.setCentroids(cent)
				w := kr.workers[0]
				np := min(50, kr.blockPts)
				copy(w.gbuf, pts[:np*d])
				kr.top2(w, np)
				for q := 0; q < np; q++ {
					b, v1, v2 := kr.top2Go(pts[q*d : q*d+d])
					if w.tbest[q] != b || w.v1[q] != v1 || w.v2[q] != v2 {
						t.Fatalf("k=%d d=%d %v point %d: top2 (%d %v %v), want (%d %v %v)", k, d, impl, q, w.tbest[q], w.v1[q], w.v2[q], b, v1, v2)
					}
				}
				kr.Close()
			}
		}
	}
}

// TestHamerlyMatchesReference: Lloyd with pruning against the plain
// Reference on well-separated data: the same assignments and iterations.
func TestHamerlyMatchesReference(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 21, N: 6000, D: 6, Blobs: 40, Spread: 40, Sigma: 0.5}
	pts := genData(t, g)
	init, _ := InitCentroids(pts, g.D, 40, 4)
	ref, err := Reference(pts, g.D, init, 60, 0)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := Lloyd(context.Background(), pts, g.D, init, Config{Impl: ImplAuto, Threads: 2, MaxIter: 60})
	if err != nil {
		t.Fatal(err)
	}
	for _, algo := range prunedAlgos {
		got, err := Lloyd(context.Background(), pts, g.D, init, Config{Impl: ImplAuto, Algo: algo, Threads: 2, MaxIter: 60})
		if err != nil {
			t.Fatal(err)
		}
		if Checksum(got.Centroids) != Checksum(bf.Centroids) || got.Iterations != bf.Iterations {
			t.Fatalf("%v: pruned Lloyd differs from brute force (%d vs %d iterations)", algo, got.Iterations, bf.Iterations)
		}
		if got.Iterations != ref.Iterations {
			t.Fatalf("%d iterations, reference %d", got.Iterations, ref.Iterations)
		}
		for i := range ref.Assign {
			if got.Assign[i] != ref.Assign[i] {
				t.Fatalf("point %d in cluster %d, reference %d", i, got.Assign[i], ref.Assign[i])
			}
		}
		for i := range ref.Centroids {
			if math.Abs(got.Centroids[i]-ref.Centroids[i]) > 1e-12*(1+math.Abs(ref.Centroids[i])) {
				t.Fatalf("centroid value %d = %v, reference %v", i, got.Centroids[i], ref.Centroids[i])
			}
		}
	}
}

// TestHamerlyBoundsSurviveArbitraryCentroids: the bounds refer to the
// kernel's own copy of the previous centroids, so a Step with unrelated
// centroids (a restored checkpoint) is still exact.
func TestHamerlyBoundsSurviveArbitraryCentroids(t *testing.T) {
	t.Parallel()
	const d, k = 5, 50
	pts := kmtest.RandPoints(31, 9000, d)
	c1 := kmtest.RandPoints(32, k, d)
	c2 := kmtest.RandPoints(33, k, d)
	for _, impl := range fastImpls() {
		for _, algo := range prunedAlgos {
			kp, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 2, Algo: algo})
			if err != nil {
				t.Fatal(err)
			}
			p := NewPartial(k, d)
			for _, c := range [][]float64{c1, c1, c2, c1, c2, c2} {
				if err := kp.Step(c, p); err != nil {
					t.Fatal(err)
				}
				want := runStep(t, pts, d, c, Config{Impl: impl, Threads: 1})
				for i, a := range kp.Assignments() {
					if a != want.assign[i] {
						t.Fatalf("%v: point %d: %d, want %d", impl, i, a, want.assign[i])
					}
				}
				if Checksum(p.Sums) != Checksum(want.p.Sums) {
					t.Fatalf("%v: sums differ", impl)
				}
			}
			kp.Close()
		}
	}
}

// TestYinyangShortHistory: with a drift history of a few versions, the
// group filter's stored bounds outlive it (a point skipped for longer than
// the history, then visited) and are rebased (a point visited while its
// stamp is half the history old); every Step stays the brute force's
// bits. The centroids settle for a while, then jump, again and again.
func TestYinyangShortHistory(t *testing.T) {
	t.Parallel()
	const d, k = 10, 160
	pts := genData(t, GenConfig{Seed: 41, N: 5000, D: d, Blobs: 8, Spread: 10, Sigma: 1})
	for _, impl := range fastImpls() {
		kb, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		kp, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 2, Algo: AlgoYinyang})
		if err != nil {
			t.Fatal(err)
		}
		kp.pr.hist = 6
		cent, err := InitCentroids(pts, d, k, 5)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, 9))
		pb, pp := NewPartial(k, d), NewPartial(k, d)
		var tot PruneStats
		for it := 1; it <= 60; it++ {
			if it%15 == 0 { // a jump: a tenth of the centroids move far
				for j := 0; j < k; j += 10 {
					for t := 0; t < d; t++ {
						cent[j*d+t] += 3 * rng.NormFloat64()
					}
				}
			}
			if err := kb.Step(cent, pb); err != nil {
				t.Fatal(err)
			}
			if err := kp.Step(cent, pp); err != nil {
				t.Fatal(err)
			}
			requireIdentical(t, fmt.Sprintf("%v iteration %d", impl, it), stepOut{kb.Assignments(), pb}, stepOut{kp.Assignments(), pp})
			tot = tot.Add(kp.PruneStats())
			if _, err := Update(cent, cent, pb.Sums, pb.Counts, k, d); err != nil {
				t.Fatal(err)
			}
		}
		restamped := 0
		for _, s := range kp.pr.stamp {
			if s > 0 {
				restamped++
			}
		}
		if restamped == 0 || tot.Grouped == 0 || tot.Skipped == 0 {
			t.Fatalf("%v: %d points rebased, %+v: the history was not outlived", impl, restamped, tot)
		}
		kb.Close()
		kp.Close()
	}
}

// AlgoAuto prunes only where brute force costs more than the bounds'
// bookkeeping (k·d ≥ autoWork), whatever the points; and a pruned Algo
// whose bounds exceed Config.BoundsMemory falls back to a cheaper one.
func TestAutoAndBoundsMemory(t *testing.T) {
	for _, c := range []struct {
		k, d int
		want Algo
	}{{10, 10, AlgoLloyd}, {100, 10, AlgoLloyd}, {499, 10, AlgoLloyd}, {500, 10, AlgoYinyang}, {1000, 10, AlgoYinyang}, {50, 100, AlgoYinyang}, {1000, 2, AlgoLloyd}} {
		if got := ChooseAlgo(AlgoAuto, c.k, c.d); got != c.want {
			t.Errorf("ChooseAlgo(auto, k=%d, d=%d) = %v, want %v", c.k, c.d, got, c.want)
		}
	}
	if got := ChooseAlgo(AlgoHamerly, 1000, 10); got != AlgoHamerly {
		t.Errorf("ChooseAlgo(hamerly) = %v", got)
	}
	const n, d, k = 2000, 10, 640
	pts := kmtest.RandPoints(7, n, d)
	yy, hm := BoundsBytes(AlgoYinyang, n, k), BoundsBytes(AlgoHamerly, n, k)
	if hm != 28*n || yy != int64(n)*(28+4*((k/groupSize+7)/8*8+1)) {
		t.Fatalf("BoundsBytes: hamerly %d, yinyang %d", hm, yy)
	}
	for _, c := range []struct {
		algo  Algo
		limit int64
		want  Algo
	}{{AlgoYinyang, 0, AlgoYinyang}, {AlgoYinyang, yy, AlgoYinyang}, {AlgoYinyang, yy - 1, AlgoHamerly}, {AlgoAuto, hm, AlgoHamerly},
		{AlgoHamerly, hm - 1, AlgoLloyd}, {AlgoYinyang, 1, AlgoLloyd}} {
		kr, err := NewKernel(pts, d, k, Config{Algo: c.algo, BoundsMemory: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		if got := kr.Algo(); got != c.want {
			t.Errorf("%v with BoundsMemory %d: %v, want %v", c.algo, c.limit, got, c.want)
		}
		kr.Close()
	}
	if _, err := NewKernel(pts, d, k, Config{Algo: AlgoAuto, Impl: ImplNaive}); err != nil {
		t.Errorf("auto with the naive kernel: %v, want brute force", err)
	}
}

func TestParseAlgo(t *testing.T) {
	for _, a := range []Algo{AlgoLloyd, AlgoHamerly, AlgoYinyang, AlgoAuto} {
		got, err := ParseAlgo(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgo(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgo("elkan"); err == nil {
		t.Fatal("ParseAlgo accepted an unknown name")
	}
	if err := (Config{Impl: ImplNaive, Algo: AlgoHamerly, Threads: 1, MaxIter: 1}).Validate(); err == nil {
		t.Fatal("hamerly with the naive kernel accepted")
	}
}

// TestValueErrorBound: the margin E that the pruning rests on covers the
// actual rounding error of the kernel's value v̂ = ||c||² − 2x·c, computed
// exactly here with big floats, on data near and far from the origin and
// with cancelling coordinates.
func TestValueErrorBound(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(41, 42))
	worst := 0.0
	for _, d := range []int{1, 2, 10, 33} {
		for _, off := range []float64{0, 1, 1e3, 1e8} {
			const k = 9
			pts := make([]float64, 64*d)
			for i := range pts {
				pts[i] = off + r.NormFloat64()*math.Pow(10, float64(r.IntN(6)-3))
				if r.IntN(4) == 0 {
					pts[i] = -pts[i]
				}
			}
			cent := append([]float64(nil), pts[:k*d]...)
			for i := range cent {
				cent[i] += r.NormFloat64() * 1e-3
			}
			kr, err := NewKernel(pts, d, k, Config{Impl: ImplGo, Threads: 1, Algo: AlgoHamerly})
			if err != nil {
				t.Fatal(err)
			}
			kr.setCentroids(cent)
			kr.prepareCentroids(kr.workers[0])
			for i := 0; i < 64; i++ {
				x := pts[i*d : i*d+d]
				e := kr.pr.errBound(kr.pr.xsq[i])
				for j := 0; j < k; j++ {
					got := new(big.Float).SetPrec(2000).SetFloat64(kr.value(x, j))
					want := new(big.Float).SetPrec(2000)
					for t2 := 0; t2 < d; t2++ {
						c := new(big.Float).SetPrec(2000).SetFloat64(cent[j*d+t2])
						xc := new(big.Float).SetPrec(2000).SetFloat64(x[t2])
						want.Add(want, new(big.Float).SetPrec(2000).Mul(c, c))
						want.Sub(want, new(big.Float).SetPrec(2000).Mul(xc, new(big.Float).SetPrec(2000).Mul(big.NewFloat(2), c)))
					}
					diff, _ := new(big.Float).Sub(got, want).Float64()
					if math.Abs(diff) > e {
						t.Fatalf("d=%d off=%v point %d centroid %d: error %g exceeds the margin %g", d, off, i, j, diff, e)
					}
					worst = max(worst, math.Abs(diff)/e)
				}
			}
			kr.Close()
		}
	}
	t.Logf("largest error / margin: %.3g", worst)
}

// k-means++ on well-separated blobs puts one starting centroid in each
// blob (a uniform draw would put two in one blob more often than not).
func TestPlusPlusSpreads(t *testing.T) {
	g := GenConfig{Seed: 5, N: 20000, D: 3, Blobs: 8, Spread: 100, Sigma: 1}
	pts := genData(t, g)
	for seed := uint64(1); seed <= 5; seed++ {
		c, err := InitPlusPlus(pts, g.D, 8, seed)
		if err != nil {
			t.Fatal(err)
		}
		for a := 0; a < 8; a++ {
			for b := a + 1; b < 8; b++ {
				if dd := sqDist(c[a*3:a*3+3], c[b*3:b*3+3]); dd < 100 {
					t.Fatalf("seed %d: centroids %d and %d are %.3g apart: one blob got two", seed, a, b, math.Sqrt(dd))
				}
			}
		}
	}
}

// TestLanesTop2: the assembly reduction of the two-smallest kernel's
// states gives laneTop2's bits, ties (equal minima in several lanes),
// +Inf lanes and all-+Inf states included.
func TestLanesTop2(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 5000
	st := make([]float64, n*3*lanes)
	for q := range n {
		s := st[q*3*lanes : (q+1)*3*lanes]
		for l := range lanes {
			switch rng.IntN(5) {
			case 0:
				s[l] = math.Inf(1)
			case 1:
				s[l] = 3 // a tie with other lanes
			default:
				s[l] = rng.NormFloat64() * 10
			}
			s[lanes+l] = float64(rng.IntN(4)*lanes + l)
			s[2*lanes+l] = math.Inf(1)
			if rng.IntN(2) == 0 && !math.IsInf(s[l], 1) {
				s[2*lanes+l] = s[l] + rng.Float64()*4
			}
		}
		if q%97 == 0 {
			for l := range lanes {
				s[l], s[2*lanes+l] = math.Inf(1), math.Inf(1)
			}
		}
	}
	out := make([]float64, 3*n)
	lanesTop2(st, n, out)
	for q := range n {
		v1, at, v2 := laneTop2(st[q*3*lanes : (q+1)*3*lanes])
		if math.Float64bits(out[3*q]) != math.Float64bits(v1) || out[3*q+1] != at || math.Float64bits(out[3*q+2]) != math.Float64bits(v2) {
			t.Fatalf("state %d: %v %v %v, want %v %v %v", q, out[3*q], out[3*q+1], out[3*q+2], v1, at, v2)
		}
	}
}

// TestRuleOut: the filter's test in assembly gives ruleOutGo's bits and
// scan bits, NaN bounds (never ruled out), +Inf padding and bounds equal
// to the threshold (not ruled out) included.
func TestRuleOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	for round := range 2000 {
		n := 8 * (1 + rng.IntN(9))
		lbs, mv := make([]float32, n), make([]float64, n)
		thr := rng.Float64() * 5
		for g := range n {
			switch rng.IntN(8) {
			case 0:
				lbs[g] = float32(math.NaN())
			case 1:
				lbs[g] = float32(math.Inf(1))
			case 2:
				lbs[g], mv[g] = float32(thr), 0
				continue
			default:
				lbs[g] = float32(rng.Float64() * 10)
			}
			mv[g] = rng.Float64() * 3
		}
		want := make([]uint8, n/8)
		got := make([]uint8, n/8)
		wl := ruleOutGo(lbs, mv, thr, want)
		gl := ruleOut(lbs, mv, thr, got)
		if math.Float64bits(wl) != math.Float64bits(gl) || !slices.Equal(got, want) {
			t.Fatalf("round %d: %v %08b, want %v %08b", round, gl, got, wl, want)
		}
	}
}

// TestOwnValues: the assembly loop of ownValues gives Kernel.value's bits
// for every listed point, with points listed in any order and centroids in
// every lane of their block.
func TestOwnValues(t *testing.T) {
	const d, k = 7, 29
	pts := genData(t, GenConfig{Seed: 5, N: 300, D: d, Blobs: 4, Spread: 5, Sigma: 1})
	for _, impl := range fastImpls() {
		kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 1, Algo: AlgoHamerly})
		if err != nil {
			t.Fatal(err)
		}
		cent, err := InitCentroids(pts, d, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := kr.Step(cent, NewPartial(k, d)); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range kr.pr.pa {
			kr.pr.pa[i] = int32(rng.IntN(k)) // any centroid, not only the nearest
		}
		idx := make([]int32, 0, kr.N())
		for _, i := range rng.Perm(kr.N()) {
			idx = append(idx, int32(i))
		}
		va := make([]float64, len(idx))
		kr.ownValues(idx, va)
		for s, i := range idx {
			want := kr.value(pts[int(i)*d:int(i)*d+d], int(kr.pr.pa[i]))
			if math.Float64bits(va[s]) != math.Float64bits(want) {
				t.Fatalf("%v: point %d centroid %d: %v, want %v", impl, i, kr.pr.pa[i], va[s], want)
			}
		}
		kr.Close()
	}
}

// TestFirstGroupBoundsHold: after Yinyang's first Step, whose group bounds
// come from the centroids' distances to each other, every point's bound
// for every group is at most its distance to each member of the group
// other than its centroid (computed exactly).
func TestFirstGroupBoundsHold(t *testing.T) {
	const d, k = 6, 300
	pts := genData(t, GenConfig{Seed: 12, N: 2000, D: d, Blobs: 5, Spread: 8, Sigma: 1})
	for _, impl := range fastImpls() {
		kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 1, Algo: AlgoYinyang})
		if err != nil {
			t.Fatal(err)
		}
		cent, err := InitCentroids(pts, d, k, 8)
		if err != nil {
			t.Fatal(err)
		}
		if err := kr.Step(cent, NewPartial(k, d)); err != nil {
			t.Fatal(err)
		}
		pr, gr := kr.pr, kr.pr.groups
		tight := 0
		for i := range kr.N() {
			a := pr.pa[i]
			for j := range k {
				if int32(j) == a {
					continue
				}
				g := gr.of[j]
				lb := float64(pr.glb[i*pr.gstride+int(g)])
				near := math.Sqrt(sqDistRow(pts[i*d:i*d+d], cent[j*d:j*d+d]))
				if lb > 0.5*near {
					tight++
				}
				if lb < near*(1-1e-9) {
					continue // clearly below: no need of the exact distance
				}
				if exact := exactDist(pts[i*d:i*d+d], cent[j*d:j*d+d]); big.NewFloat(lb).Cmp(exact) > 0 {
					t.Fatalf("%v: point %d group %d bound %v above the distance %v to centroid %d", impl, i, g, lb, exact, j)
				}
			}
		}
		if tight == 0 {
			t.Fatalf("%v: no bound above half the distance: the test checks nothing", impl)
		}
		kr.Close()
	}
}

// exactDist is the Euclidean distance between x and c, to 200 bits.
func exactDist(x, c []float64) *big.Float {
	s := new(big.Float).SetPrec(200)
	for t := range x {
		e := new(big.Float).SetPrec(200).SetFloat64(x[t])
		e.Sub(e, new(big.Float).SetPrec(200).SetFloat64(c[t]))
		s.Add(s, e.Mul(e, e))
	}
	return s.Sqrt(s)
}
