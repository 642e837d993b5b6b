package kernel

import (
	"math"
	"math/bits"
)

// AlgoYinyang's group filter, batched. A point whose global bounds fail
// (assignPruned) is settled in three steps over a batch of points:
//
//  1. filter: per group, the point's stored bound moved by the group's
//     drift since it was stored; a group whose moved bound proves every
//     member farther than the point's centroid is ruled out, the others
//     are queued as (point, group) pairs;
//  2. scan: the pairs group by group, the gathered points of one group
//     through the brute-force kernel that keeps each lane's two smallest
//     values (on AVX-512; elsewhere groups.scan in Go), the same bits;
//  3. resolve: per point the nearest centroid, as brute force picks it
//     (the smallest v̂, ties to the lowest index), and fresh bounds for
//     the groups scanned.
//
// Batching is what makes the scan cheap: a point rarely needs more than
// one or two groups, and a group's few blocks through the kernel cost a
// fraction of its call when the kernel sees one point at a time.
//
// Stored bounds are relative to the point's stamp (pruner.glb): the bound
// of point i and group g at version v is glb[i*gstride+g] − (cumUp(v) −
// cumLo(stamp[i])), so a group that is ruled out costs a read, not a
// write.

// yyWork is a worker's state for one batch of the group filter.
type yyWork struct {
	pts []yyPoint // the points of the batch that reached the filter
	// The pairs, in the order filter queued them (a point's pairs are
	// contiguous, from its first): group, point (index into pts), and
	// what the scan found: the smallest value, its centroid, the second
	// smallest.
	pg, pp []int32
	v1, v2 []float64
	j1     []int32
	// byGroup lists the pairs group by group (counting sort, cnt[g] the
	// start of group g's run).
	byGroup []int32
	cnt     []int32
	// mv caches the moves since version mvStamp, up to the current one
	// (mvVer): most points share their stamp.
	mv               []float64
	off              []float64 // the same stamp: cumLo(now) − cumLo(stamp), rounded down
	scan             []uint8   // ruleOut's groups to scan, a bit each
	mvStamp, mvVer   int32
	mvValid, mvStale bool
}

// yyPoint is one point of the batch in the group filter.
type yyPoint struct {
	i       int32   // the point
	a, bi   int32   // its centroid before, and the nearest found so far
	va, bv  float64 // their values
	e, lmin float64 // its error bound; the smallest moved bound of the groups ruled out
	first   int32   // its first pair
	rebase  bool    // its stamp is moved to the current version
}

func newYYWork(g, stride int) *yyWork {
	return &yyWork{mv: make([]float64, stride), off: make([]float64, stride), cnt: make([]int32, g+1), scan: make([]uint8, stride/8)}
}

// ruleOut is the filter's test over one point's group bounds lbs (a
// multiple of 8 of them, the padding +Inf) moved by mv (padding 0): group
// g is ruled out when lbs[g] − mv[g] > thr (NaN is not). It sets bit g%8
// of scan[g/8] for each group that is not, and returns the smallest moved
// bound of those that are (+Inf if none). ruleOutGo is the definition;
// on AVX-512 it runs eight groups to an instruction, the same bits.
func ruleOutGo(lbs []float32, mv []float64, thr float64, scan []uint8) float64 {
	lmin := math.Inf(1)
	clear(scan)
	for g, s := range lbs {
		lb := float64(s) - mv[g]
		if lb > thr {
			if lb < lmin { // not min: no NaN or signed zero to care for here
				lmin = lb
			}
			continue
		}
		scan[g/8] |= 1 << (g % 8)
	}
	return lmin
}

// yyMoves fills w.yy.mv (and off) for points stamped stamp; it reports
// false when stamp is too old for the drift history (pruner.hist), so that
// the point's bounds must be taken as 0.
func (kr *Kernel) yyMoves(yy *yyWork, stamp int32) bool {
	pr := kr.pr
	if yy.mvValid && yy.mvStamp == stamp && yy.mvVer == pr.ver {
		return !yy.mvStale
	}
	gr := pr.groups
	yy.mvValid, yy.mvStamp, yy.mvVer = true, stamp, pr.ver
	age := pr.ver - stamp
	yy.mvStale = age < 0 || age >= pr.hist
	if yy.mvStale {
		return false
	}
	cur := int(pr.ver%pr.hist) * gr.n
	old := int(stamp%pr.hist) * gr.n
	for g := range gr.n { // the padding's moves stay 0
		yy.mv[g] = pr.up(pr.cumUp[cur+g] - pr.cumLo[old+g])
		// Not clamped at 0: down may lower a sum a little when a group
		// does not move, and a stored bound must never rise by it.
		yy.off[g] = pr.down(pr.cumLo[cur+g] - pr.cumLo[old+g])
	}
	return true
}

// yyBatch is the number of points in a batch of the group filter: enough
// that each group's run of pairs fills the kernel's point groups.
const yyBatch = 2048

// rebaseAge is the age of a point's stamp at which the filter moves it to
// the current version (rewriting the point's bounds), well inside the
// drift history.
func (pr *pruner) rebaseAge() int32 { return pr.hist / 2 }

// yyThreshold is the filter's threshold for a point whose distance to its
// centroid is at most ub, its margin e: a group is ruled out when its
// moved bound exceeds it, as it is at least √(ub² + 2E): then every
// member's v̂ is above the centroid's (see pruner). float64(lbs[g]) −
// mv[g] is computed with one rounding, covered by the threshold's margin
// and by the rounding down of lmin.
func (pr *pruner) yyThreshold(ub, e float64) float64 {
	return pr.upPos(pr.upPos(math.Sqrt(pr.upPos(ub*ub + 2*e)))) // ub, e ≥ 0
}

// yyFilter is step 1 for point i, whose global bounds failed: a is its
// centroid, va its value, e the margin, thr its threshold (yyThreshold).
// It reports true when every group is ruled out: a stays, settled at once.
func (kr *Kernel) yyFilter(w *worker, i int, a int32, va, e, thr float64) bool {
	pr := kr.pr
	gr := pr.groups
	yy := w.yy
	lbs := pr.glb[i*pr.gstride : (i+1)*pr.gstride]
	p := yyPoint{i: int32(i), a: a, bi: a, va: va, bv: va, e: e, lmin: math.Inf(1), first: int32(len(yy.pg))}
	slot := int32(len(yy.pts))
	known := kr.yyMoves(yy, pr.stamp[i])
	p.rebase = !known || pr.ver-pr.stamp[i] >= pr.rebaseAge()
	mv := yy.mv[:len(lbs)]
	lmin := math.Inf(1)
	if known {
		lmin = ruleOut(lbs, mv, thr, yy.scan)
		for b, m := range yy.scan {
			for ; m != 0; m &= m - 1 {
				yy.pg = append(yy.pg, int32(8*b+bits.TrailingZeros8(m)))
				yy.pp = append(yy.pp, slot)
			}
		}
	} else {
		for g := range gr.n {
			yy.pg = append(yy.pg, int32(g))
			yy.pp = append(yy.pp, slot)
		}
	}
	if !math.IsInf(lmin, 1) {
		lmin = pr.down(lmin)
	}
	p.lmin = lmin
	if p.rebase && known {
		// Ruled-out groups keep their moved bound, now relative to the
		// current version; scanned ones get fresh bounds (yyResolve).
		for g, s := range lbs[:gr.n] {
			if lb := float64(s) - mv[g]; lb > thr {
				lbs[g] = f32down(pr.down(lb))
			}
		}
	}
	if int32(len(yy.pg)) == p.first {
		// Every group ruled out: a stays, and only the global lower
		// bound changes (and the stamp, if the bounds were rebased).
		pr.l[i] = p.lmin
		if p.rebase {
			pr.stamp[i] = pr.ver
		}
		return true
	}
	yy.pts = append(yy.pts, p)
	return false
}

// yyResolve runs steps 2 and 3 for the batch's points and writes each
// one's nearest centroid into best (indexed from lo). Step 3 goes in three
// loops over the batch (the winners, every pair's bound, the stores), so
// that the pairs' square roots overlap.
func (kr *Kernel) yyResolve(w *worker, lo int, best []int32) {
	yy := w.yy
	pr := kr.pr
	gr := pr.groups
	if len(yy.pts) == 0 {
		return
	}
	kr.yyScan(w)
	for s := range yy.pts {
		p := &yy.pts[s]
		for q := p.first; q < yy.end(s); q++ {
			if v, j := yy.v1[q], yy.j1[q]; v < p.bv || (v == p.bv && j < p.bi) {
				p.bv, p.bi = v, j
			}
		}
	}
	// Each pair's bound, into v1: the smallest value of a member other
	// than the winner, as a lower bound on the distance.
	for q, s := range yy.pp {
		p := &yy.pts[s]
		m := yy.v1[q]
		if yy.j1[q] == p.bi {
			m = yy.v2[q]
		}
		if !math.IsInf(m, 1) { // else no member but the winner: +Inf
			m = pr.lowerDist(m, pr.xsq[p.i], p.e)
		}
		yy.v1[q] = m
	}
	for s := range yy.pts {
		p := &yy.pts[s]
		end := yy.end(s)
		kr.yyBounds(yy, p, p.first, end)
		best[int(p.i)-lo] = p.bi
		w.stats.Grouped++
		w.stats.GroupsScanned += int64(end - p.first)
		for q := p.first; q < end; q++ {
			w.stats.Distances += int64(gr.size[yy.pg[q]])
		}
	}
	yy.pts, yy.pg, yy.pp = yy.pts[:0], yy.pg[:0], yy.pp[:0]
}

// end is the end of the pairs of the batch's point s.
func (yy *yyWork) end(s int) int32 {
	if s+1 < len(yy.pts) {
		return yy.pts[s+1].first
	}
	return int32(len(yy.pg))
}

// yyBounds stores point p's new bounds once its nearest centroid is known:
// per scanned group (pairs [q0, q1)) the bound yyResolve put in v1; a's
// group, when a lost and its group was not scanned, also covers a; the
// global lower bound l is the smallest of all.
func (kr *Kernel) yyBounds(yy *yyWork, p *yyPoint, q0, q1 int32) {
	pr := kr.pr
	gr := pr.groups
	i := int(p.i)
	lbs := pr.glb[i*pr.gstride : (i+1)*pr.gstride]
	xsq := pr.xsq[i]
	off := yy.off
	if p.rebase {
		off = nil // relative to the current version: no offset
	}
	store := func(g int32, b float64) {
		if off != nil {
			b = pr.down(b + off[g])
		}
		lbs[g] = f32down(b)
	}
	kr.yyMoves(yy, pr.stamp[i]) // the batch's points may have other stamps
	l := p.lmin
	ga := gr.of[p.a]
	scannedA := false
	for q := q0; q < q1; q++ {
		g := yy.pg[q]
		b := yy.v1[q]
		store(g, b)
		l = min(l, b)
		scannedA = scannedA || g == ga
	}
	if p.bi != p.a {
		b := pr.lowerDist(p.va, xsq, p.e)
		if !scannedA {
			ob := float64(lbs[ga])
			if off != nil {
				ob -= yy.mv[ga]
			}
			b = min(b, pr.down(ob))
			store(ga, b)
		}
		l = min(l, b)
		pr.u[i] = pr.upperDist(p.bv, xsq, p.e)
	}
	pr.l[i] = l
	pr.pa[i] = p.bi
	if p.rebase {
		pr.stamp[i] = pr.ver
	}
}

// yyScan is step 2: every queued pair's smallest value, its centroid and
// the second smallest value, group by group.
func (kr *Kernel) yyScan(w *worker) {
	yy := w.yy
	gr := kr.pr.groups
	d := kr.d
	np := len(yy.pg)
	yy.v1 = grow(yy.v1, np)
	yy.v2 = grow(yy.v2, np)
	yy.j1 = grow(yy.j1, np)
	yy.byGroup = grow(yy.byGroup, np)
	clear(yy.cnt)
	for _, g := range yy.pg {
		yy.cnt[g+1]++
	}
	for g := 1; g < len(yy.cnt); g++ {
		yy.cnt[g] += yy.cnt[g-1]
	}
	for q, g := range yy.pg {
		yy.byGroup[yy.cnt[g]] = int32(q)
		yy.cnt[g]++
	}
	// cnt[g] is now the end of group g's run, the start of g+1's.
	start := int32(0)
	for g := 0; g < gr.n; g++ {
		run := yy.byGroup[start:yy.cnt[g]]
		start = yy.cnt[g]
		if kr.impl != ImplAVX512 {
			for _, q := range run {
				x := kr.points[int(yy.pts[yy.pp[q]].i)*d:]
				yy.v1[q], yy.j1[q], yy.v2[q] = gr.scan(x[:d], d, g, -1)
			}
			continue
		}
		for len(run) > 0 {
			n := min(len(run), kr.blockPts)
			kr.yyScanAVX512(w, g, run[:n])
			run = run[n:]
		}
	}
}

// yyScanAVX512 scans group g for the pairs run (at most blockPts): their
// points gathered into w.gbuf, one call of the two-smallest kernel over
// the group's blocks.
func (kr *Kernel) yyScanAVX512(w *worker, g int, run []int32) {
	yy := w.yy
	gr := kr.pr.groups
	d := kr.d
	for n, q := range run {
		i := int(yy.pts[yy.pp[q]].i)
		copy(w.gbuf[n*d:n*d+d], kr.points[i*d:i*d+d])
	}
	npad := w.pad(len(run), d, 4)
	st := w.state[:npad*3*lanes]
	b0, b1 := gr.blk[g], gr.blk[g+1]
	asmArgmin2(w.gbuf[:npad*d], npad, d, gr.pack[b0*d*lanes:b1*d*lanes], b1-b0, gr.norm[b0*lanes:b1*lanes], float64(b0*lanes), st, asmFirst)
	t3 := w.t3[:3*len(run)]
	lanesTop2(st, len(run), t3)
	for n, q := range run {
		v1, at, v2 := t3[3*n], t3[3*n+1], t3[3*n+2]
		yy.v1[q], yy.v2[q], yy.j1[q] = v1, v2, -1
		if !math.IsInf(v1, 1) {
			yy.j1[q] = gr.idx[int(at)]
		}
	}
}

// grow returns s with length n, reallocated only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}
