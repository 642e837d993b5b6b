package kernel

import (
	"fmt"
	"math"
)

// Algo selects how a Kernel finds each point's nearest centroid. Every
// Algo gives the same assignments, sums, counts and SSE bit for bit (for a
// given Impl); they differ only in speed. See doc.go, "Exact pruning".
type Algo int

const (
	// AlgoLloyd compares every point with every centroid (brute force).
	AlgoLloyd Algo = iota
	// AlgoHamerly keeps, per point, an upper bound on the distance to its
	// centroid and a lower bound on the distance to every other one
	// (Hamerly 2010), widened by a margin that covers the rounding of the
	// kernel's arithmetic, and skips the points whose bounds prove that
	// their centroid has not changed.
	AlgoHamerly
	// AlgoYinyang adds to AlgoHamerly's bounds one lower bound per point
	// and group of nearby centroids (Ding et al. 2015): a point whose
	// global bounds fail compares itself only with the groups whose own
	// bound fails, instead of with every centroid.
	AlgoYinyang
	// AlgoAuto picks by k and the dimension (ChooseAlgo): the same on every
	// rank and for any number of ranks.
	AlgoAuto
)

var algoNames = [...]string{"lloyd", "hamerly", "yinyang", "auto"}

func (a Algo) String() string { return enumName(algoNames[:], int(a), "Algo") }

// ParseAlgo parses the names printed by Algo.String ("lloyd", "hamerly",
// "yinyang", "auto").
func ParseAlgo(s string) (Algo, error) {
	a, err := parseEnum(algoNames[:], s, "algorithm")
	return Algo(a), err
}

// autoWork is the k·d at and above which AlgoAuto prunes. Brute force
// costs about 0.2 ns per distance in 10-D on the reference machine, 20-30
// ns per point per iteration at k = 100, less than the bookkeeping of the
// bounds; Yinyang was 2x ahead at k = 1,000 and behind at k = 300
// (bench/RESULTS.md).
const autoWork = 5000

// ChooseAlgo is AlgoAuto's choice for k centroids in d dimensions:
// AlgoYinyang when k·d ≥ autoWork, else AlgoLloyd. Any other a is
// returned as it is.
func ChooseAlgo(a Algo, k, d int) Algo {
	if a != AlgoAuto {
		return a
	}
	if int64(k)*int64(d) >= autoWork {
		return AlgoYinyang
	}
	return AlgoLloyd
}

// BoundsBytes is the memory an Algo's bounds take for n points and k
// centroids, on top of the assignments every Kernel keeps: per point,
// AlgoHamerly two distance bounds, ||x||² and the centroid they refer to
// (28 bytes); AlgoYinyang those and a float32 bound per group of centroids
// (about k/64 groups, rounded up to a multiple of 8) and a version stamp
// (28 + 4·(G+1) bytes).
func BoundsBytes(a Algo, n, k int) int64 {
	switch a {
	case AlgoHamerly:
		return int64(n) * 28
	case AlgoYinyang:
		return int64(n) * (28 + 4*int64((numGroups(k)+7)&^7+1))
	}
	return 0
}

// fitAlgo returns a, or the next cheaper Algo whose bounds for n points
// fit in limit bytes (0: no limit): AlgoYinyang falls back to AlgoHamerly,
// AlgoHamerly to AlgoLloyd.
func fitAlgo(a Algo, n, k int, limit int64) Algo {
	for limit > 0 && BoundsBytes(a, n, k) > limit {
		switch a {
		case AlgoYinyang:
			a = AlgoHamerly
		default:
			return AlgoLloyd
		}
	}
	return a
}

// PruneStats counts what the last Step did per point. Under AlgoLloyd every
// point is Scanned.
type PruneStats struct {
	// Skipped points kept their centroid on the carried bounds alone.
	Skipped int64
	// Tightened points kept it after one distance (to their own centroid)
	// was recomputed.
	Tightened int64
	// Grouped points (AlgoYinyang) were compared with the centroids of
	// the groups their bounds could not rule out; GroupsScanned counts
	// those groups.
	Grouped       int64
	GroupsScanned int64
	// Scanned points were compared with every centroid.
	Scanned int64
	// Distances counts the distances (values v̂) computed, every kind of
	// point together: k per scanned point, one per point whose bound was
	// tightened, each member of each group scanned.
	Distances int64
}

// String gives the shares of the points and the distances per point:
// "skipped 61.2% one-distance 9.1% grouped 0.0% scanned 29.7% of N;
// 297.9 distances per point".
func (s PruneStats) String() string {
	n := s.Skipped + s.Tightened + s.Grouped + s.Scanned
	pc := func(v int64) float64 { return 100 * float64(v) / float64(max(n, 1)) }
	return fmt.Sprintf("skipped %.1f%% one-distance %.1f%% grouped %.1f%% scanned %.1f%% of %d; %.1f distances per point",
		pc(s.Skipped), pc(s.Tightened), pc(s.Grouped), pc(s.Scanned), n, float64(s.Distances)/float64(max(n, 1)))
}

// Add returns s + o.
func (s PruneStats) Add(o PruneStats) PruneStats {
	return PruneStats{s.Skipped + o.Skipped, s.Tightened + o.Tightened, s.Grouped + o.Grouped,
		s.GroupsScanned + o.GroupsScanned, s.Scanned + o.Scanned, s.Distances + o.Distances}
}

// tinyAbs is an absolute slack added to every widened bound. It covers
// the absolute error of results that underflow (at most 2^-1075 per
// operation, a few hundred thousand operations at most), which a relative
// margin alone would not.
const tinyAbs = 0x1p-1000

// subBlocks is the number of centroid blocks per sub-group of a full scan
// (see top2).
const subBlocks = 8

// pruner is the state of AlgoHamerly: per point bounds on true Euclidean
// distances, valid for the centroids in Kernel.cent and the assignment pa.
//
// The kernel compares v(x, c) = ||c||² − 2x·c as a chain of fused
// multiply-adds (doc.go). With u = 2^-53 and γ_n = nu/(1−nu), the computed
// value differs from the exact one by at most
//
//	γ_{2d+1}·(||c||² + 2||x||·||c||) ≤ 2γ_{2d+1}·(||x||² + ||c||²) =: E(x)
//
// when ||c||² ≤ R² for every centroid (γ_d for ||c||², γ_d for the chain
// of d fused operations on top of it). So if the squared distances satisfy
// D_j − D_a > 2E for every j ≠ a, the computed values satisfy v̂_j > v̂_a
// strictly and the kernel picks a. The bounds m ≤ min_{j≠a} √D_j and
// ub ≥ √D_a decide it: m² − ub² > 2E. Every bound is rounded outwards by a
// relative margin rel (≥ 16u, more than the handful of roundings behind
// each) plus tinyAbs.
type pruner struct {
	yinyang bool
	rel     float64 // relative outward rounding margin
	gE      float64 // E(x) = gE·(||x||²_up + R²_up)

	u, l  []float64 // n: bound on the distance to pa, and to every other centroid
	xsq   []float64 // n: upper bound on ||x||²
	pa    []int32   // n: the centroid the bounds refer to; -1: no bounds yet
	have  bool      // Kernel.cent holds the centroids the bounds refer to
	drift []float64 // k: upper bound on how far each centroid moved in this Step
	half  []float64 // k: lower bound on half the distance to the nearest other centroid
	r2    float64   // upper bound on max ||c||²
	dmax1 float64   // the largest drift, that of centroid darg
	dmax2 float64   // the largest drift of any other centroid
	darg  int

	// AlgoYinyang: the groups of centroids (fixed at the first Step), the
	// largest drift in each, and per point and group a lower bound on the
	// distance to every member other than pa (float32, rounded down),
	// relative to the point's stamp: at version v it is
	// glb[i*G+g] − (cumUp(v) − cumLo(stamp[i])) (yyfilter.go).
	groups  *groups
	gdrift  []float64 // G
	glb     []float32 // n*gstride: G groups, padded with +Inf to a multiple of 8
	gstride int
	stamp   []int32 // n
	// ver counts the Steps; cumUp and cumLo hold, for the last histLen
	// versions v (at v%histLen), every group's drifts summed over versions
	// 1..v, rounded up and down: the members of group g moved at most
	// cumUp(v)−cumLo(v0) between versions v0 and v.
	// ccg holds, for the first Step's full scans (freshGroupBounds), per
	// centroid a and group g a lower bound on the distance from c_a to
	// g's members other than a: k*G.
	ccg []float64

	ver          int32
	hist         int32 // versions kept: histLen (tests make it shorter)
	cumUp, cumLo []float64
}

// histLen is how many versions of group drift sums are kept; a point
// whose group bounds are older takes them as 0 (still valid).
const histLen = 1024

func newPruner(points []float64, n, d, k int, yinyang bool) *pruner {
	pr := &pruner{
		yinyang: yinyang,
		rel:     float64(2*d+16) * 0x1p-53,
		gE:      float64(4*d+8) * 0x1p-53,
		u:       make([]float64, n),
		l:       make([]float64, n),
		xsq:     make([]float64, n),
		pa:      make([]int32, n),
		drift:   make([]float64, k),
		half:    make([]float64, k),
		hist:    histLen,
	}
	hugePages(pr.u)
	hugePages(pr.l)
	hugePages(pr.xsq)
	for i := range pr.pa {
		pr.pa[i] = -1
		var s float64
		for _, v := range points[i*d : i*d+d] {
			s = math.FMA(v, v, s)
		}
		pr.xsq[i] = pr.up(s)
	}
	return pr
}

// up and down round a computed value outwards: up(x) ≥ the exact value
// when x carries a few roundings, down(x) ≤ it.
// They are x ± |x|·rel ± tinyAbs, the absolute value taken by the sign's
// test (the same bits: rounding is symmetric), which costs less than
// math.Abs: on amd64 that crosses from the vector registers to the
// integer ones and back.
func (pr *pruner) up(x float64) float64 {
	if x < 0 {
		return x - x*pr.rel + tinyAbs
	}
	return x + x*pr.rel + tinyAbs
}

func (pr *pruner) down(x float64) float64 {
	if x < 0 {
		return x + x*pr.rel - tinyAbs
	}
	return x - x*pr.rel - tinyAbs
}

// upPos and downPos are up and down, the same bits, for x ≥ 0 (or ±0,
// or NaN) only: they save the test of the sign.
func (pr *pruner) upPos(x float64) float64   { return x + x*pr.rel + tinyAbs }
func (pr *pruner) downPos(x float64) float64 { return x - x*pr.rel - tinyAbs }

// errBound is E for a point with upper bound xsq on ||x||² (both terms of
// the sum are ≥ 0).
func (pr *pruner) errBound(xsq float64) float64 {
	return pr.upPos(pr.gE * (xsq + pr.r2))
}

// settled reports whether a point's bounds prove its centroid a the
// nearest: lb bounds its distance to every other centroid from below, h
// is twice pr.half[a] (every other centroid is at least h − ub away), ub
// bounds its distance to a from above and e is its E; the test is
// m² − ub² > 2E for m the better of the two lower bounds, with its own
// rounding covered. Without a branch: the builtin max is branch-free on
// amd64 (a NaN lb, which no bound is, fails the test, which is always
// allowed); h − ub rounded down as if it were ≥ 0 stays below 0 when it
// is not, and m is taken at least 0, where the test fails.
func (pr *pruner) settled(lb, h, ub, e float64) bool {
	m := max(lb, pr.downPos(h-ub), 0)
	return pr.downPos(m*m) > pr.upPos(ub*ub+2*e)
}

// upperDist converts a computed value v̂ of the assigned centroid into an
// upper bound on the distance; lowerDist converts the smallest computed
// value of the other centroids into a lower bound on their distances.
func (pr *pruner) upperDist(v, xsq, e float64) float64 {
	s := pr.up(pr.up(v+xsq) + e)
	if s < 0 { // a NaN stays one: no bound, never a test passed
		s = 0
	}
	return pr.upPos(math.Sqrt(s))
}

func (pr *pruner) lowerDist(v, xsq, e float64) float64 {
	xlo := pr.downPos(xsq - 2*xsq*pr.rel) // xsq (≥ 0) is rounded up; undo with margin
	s := pr.down(pr.down(v+xlo) - e)
	if s <= 0 {
		return 0
	}
	return pr.downPos(math.Sqrt(s))
}

// prepare runs before the new centroids c are packed (Kernel.cent still
// holds the previous ones): it bounds how far each centroid moved.
func (kr *Kernel) prepare(c []float64) {
	pr, d := kr.pr, kr.d
	pr.dmax1, pr.dmax2, pr.darg = 0, 0, -1
	if !pr.have {
		return
	}
	for j := 0; j < kr.k; j++ {
		var s float64
		for t := 0; t < d; t++ {
			e := c[j*d+t] - kr.cent[j*d+t]
			s = math.FMA(e, e, s)
		}
		dj := 0.0
		if s > 0 {
			dj = pr.up(math.Sqrt(pr.up(s)))
		}
		pr.drift[j] = dj
		switch {
		case dj > pr.dmax1:
			pr.dmax2, pr.dmax1, pr.darg = pr.dmax1, dj, j
		case dj > pr.dmax2:
			pr.dmax2 = dj
		}
	}
}

// prepareCentroids runs after the new centroids are packed: R² and, per
// centroid, half the distance to its nearest neighbour (from a full scan
// of the centroids themselves, on worker w's buffers).
func (kr *Kernel) prepareCentroids(w *worker) {
	pr, d := kr.pr, kr.d
	r2 := 0.0
	for j := 0; j < kr.k; j++ {
		r2 = max(r2, kr.cnorm[j])
	}
	pr.r2 = pr.up(r2)
	if pr.yinyang {
		if pr.groups == nil {
			gr := newGroups(kr.cent, kr.k, d)
			pr.groups = gr
			pr.gdrift = make([]float64, gr.n)
			// Each point's group bounds are padded to a multiple of 8
			// with +Inf (always ruled out) for ruleOut's vectors.
			pr.gstride = (gr.n + 7) &^ 7
			pr.glb = make([]float32, kr.n*pr.gstride)
			hugePages(pr.glb)
			if pr.gstride > gr.n {
				for i := range kr.n {
					for g := gr.n; g < pr.gstride; g++ {
						pr.glb[i*pr.gstride+g] = float32(math.Inf(1))
					}
				}
			}
			pr.stamp = make([]int32, kr.n)
			pr.cumUp = make([]float64, int(pr.hist)*gr.n)
			pr.cumLo = make([]float64, int(pr.hist)*gr.n)
			for _, wk := range kr.workers {
				wk.yy = newYYWork(gr.n, pr.gstride)
			}
		}
		pr.groups.fill(kr)
		if !pr.have {
			kr.centroidGroupBounds() // the first Step's full scans need them
		}
		kr.yinyangPrepare()
	}
	for lo := 0; lo < kr.k; lo += kr.blockPts {
		hi := min(lo+kr.blockPts, kr.k)
		np := hi - lo
		copy(w.gbuf, kr.cent[lo*d:hi*d])
		kr.top2(w, np)
		for i := 0; i < np; i++ {
			j := lo + i
			if int(w.tbest[i]) != j {
				pr.half[j] = 0 // a duplicate (or rounding) beat the centroid itself
				continue
			}
			xsq := pr.up(kr.cnorm[j])
			pr.half[j] = 0.5 * pr.lowerDist(w.v2[i], xsq, pr.errBound(xsq))
		}
	}
}

// value is the kernel's value v̂(x, c_j): ||c_j||² then one fused
// multiply-add per dimension in dimension order, the same bits as every
// blocked kernel computes for this pair.
func (kr *Kernel) value(x []float64, j int) float64 {
	d := kr.d
	// −2c from the row-major copy (one or two cache lines, not d): the
	// same bits as Kernel.cpack, where setCentroids stores −2c too.
	c := kr.cent[j*d : j*d+d]
	acc := kr.cnorm[j]
	for t, v := range x[:d] {
		acc = math.FMA(v, -2*c[t], acc)
	}
	return acc
}

// PruneStats returns the counts of the last Step.
func (kr *Kernel) PruneStats() PruneStats {
	var s PruneStats
	for _, w := range kr.workers {
		s = s.Add(w.stats)
	}
	return s
}

// Algo is the algorithm in use.
func (kr *Kernel) Algo() Algo {
	switch {
	case kr.pr == nil:
		return AlgoLloyd
	case kr.pr.yinyang:
		return AlgoYinyang
	}
	return AlgoHamerly
}
