package kernel

import "math"

// assignPruned writes the nearest centroid of points [lo, hi) into w.best,
// the same as argmin would, using and updating the bounds. It runs in
// stages over the batch, each a loop over points whose iterations do not
// depend on each other and whose outcome is a list, not a branch taken
// per point: so the processor runs the next points' chains of dependent
// operations (a square root, a value's fused multiply-adds) while one
// point's finish, instead of waiting on each and guessing which way each
// point goes.
//
//  1. boundsTest: the global bounds moved by the drifts; points they
//     settle keep their centroid, the others are listed (w.vidx), and
//     points without bounds go to the full scan (w.fidx);
//  2. tighten: the listed points' own value, their upper bound exact
//     again; points it settles keep their centroid, the others are listed
//     again;
//  3. Yinyang's group filter for those (yyfilter.go), or for Hamerly the
//     full scan;
//  4. the full scans, then the group filter's scans and bounds.
func (kr *Kernel) assignPruned(w *worker, lo, hi int) {
	best := w.best[:hi-lo]
	nf, nv := kr.boundsTest(w, lo, hi, best)
	nv = kr.tighten(w, nv)
	if kr.pr.groups != nil {
		kr.yyFilterAll(w, nv)
	} else {
		nf += copy(w.fidx[nf:], w.vidx[:nv])
	}
	kr.scanFull(w, lo, best, nf)
	if kr.pr.groups != nil {
		kr.yyResolve(w, lo, best)
	}
}

// yyFilterAll is stage 3 for Yinyang over the nv points listed: the
// thresholds first, in a loop of their own (their square roots overlap),
// then the group filter point by point.
func (kr *Kernel) yyFilterAll(w *worker, nv int) {
	pr := kr.pr
	w.thr = grow(w.thr, nv)
	for s, i := range w.vidx[:nv] {
		w.thr[s] = pr.yyThreshold(pr.u[i], w.ev[s])
	}
	for s, i := range w.vidx[:nv] {
		if kr.yyFilter(w, int(i), pr.pa[i], w.va[s], w.ev[s], w.thr[s]) {
			w.stats.Grouped++
		}
	}
}

// boundsTest is stage 1 over points [lo, hi): it moves each point's bounds
// by the drifts, writes its centroid into best (stage 2 or 3 overwrite it
// where it changes), and lists the points whose bounds do not settle it
// in w.vidx (nv of them) and those without bounds in w.fidx (nf).
func (kr *Kernel) boundsTest(w *worker, lo, hi int, best []int32) (nf, nv int) {
	pr := kr.pr
	for i := lo; i < hi; i++ {
		a := pr.pa[i]
		if a < 0 {
			w.fidx[nf] = int32(i)
			nf++
			continue
		}
		e := pr.errBound(pr.xsq[i])
		ub := pr.u[i]
		lb := pr.l[i]
		if pr.have {
			ub = pr.upPos(ub + pr.drift[a])
			other := pr.dmax1
			if int(a) == pr.darg {
				other = pr.dmax2
			}
			lb = pr.down(lb - other)
			pr.l[i] = lb
		}
		pr.u[i] = ub
		best[i-lo] = a
		w.vidx[nv] = int32(i)
		nv += b2i(!pr.settled(lb, 2*pr.half[a], ub, e))
	}
	w.stats.Skipped += int64(hi - lo - nf - nv)
	return nf, nv
}

// tighten is stage 2 over the nv points listed in w.vidx: each one's value
// for its own centroid (in w.va, its error bound in w.ev) makes its upper
// bound exact; it returns the points still not settled, listed again at
// the front of w.vidx, w.va and w.ev.
func (kr *Kernel) tighten(w *worker, nv int) int {
	pr := kr.pr
	kr.ownValues(w.vidx[:nv], w.va)
	left := 0
	for s := range nv {
		i := int(w.vidx[s])
		a := pr.pa[i]
		e := pr.errBound(pr.xsq[i])
		va := w.va[s]
		ub := pr.upperDist(va, pr.xsq[i], e)
		pr.u[i] = ub
		w.vidx[left], w.va[left], w.ev[left] = int32(i), va, e
		left += b2i(!pr.settled(pr.l[i], 2*pr.half[a], ub, e))
	}
	w.stats.Distances += int64(nv)
	w.stats.Tightened += int64(nv - left)
	return left
}

// ownValues writes into va, for each point listed in idx, its value for its
// own centroid (pruner.pa): Kernel.value's bits, in assembly where the
// processor has the fused multiply-add (the Go code pays a test of the
// processor at each math.FMA).
func (kr *Kernel) ownValues(idx []int32, va []float64) {
	pr, d := kr.pr, kr.d
	if len(idx) == 0 {
		return
	}
	if !hasFMA {
		for s, i := range idx {
			va[s] = kr.value(kr.points[int(i)*d:int(i)*d+d], int(pr.pa[i]))
		}
		return
	}
	if len(va) < len(idx) || len(kr.cpack) < kr.kpad*d {
		panic("kmeans: internal error: bad ownValues arguments")
	}
	for _, i := range idx { // the assembly trusts the indices
		if i < 0 || int(i) >= kr.n || pr.pa[i] < 0 || int(pr.pa[i]) >= kr.k {
			panic("kmeans: internal error: bad ownValues index")
		}
	}
	ownValuesFMA(&kr.points[0], d, &kr.cpack[0], &kr.cnorm[0], &idx[0], &pr.pa[0], len(idx), &va[0])
}

// scanFull finds the nearest centroid of the nf points listed in w.fidx by
// scanning every centroid, blockPts points at a time, and gives them fresh
// bounds (and, for Yinyang, group bounds from the centroids' own distances
// and stamps).
func (kr *Kernel) scanFull(w *worker, lo int, best []int32, nf int) {
	pr, d := kr.pr, kr.d
	w.stats.Scanned += int64(nf)
	w.stats.Distances += int64(nf) * int64(kr.k)
	for f0 := 0; f0 < nf; {
		np := 0
		for ; f0+np < nf && np < kr.blockPts; np++ {
			i := int(w.fidx[f0+np])
			copy(w.gbuf[np*d:np*d+d], kr.points[i*d:i*d+d])
		}
		kr.top2(w, np)
		for q := 0; q < np; q++ {
			i := int(w.fidx[f0+q])
			e := pr.errBound(pr.xsq[i])
			a := w.tbest[q]
			pr.pa[i] = a
			pr.u[i] = pr.upperDist(w.v1[q], pr.xsq[i], e)
			pr.l[i] = pr.lowerDist(w.v2[q], pr.xsq[i], e)
			best[i-lo] = a
			if pr.groups != nil {
				kr.freshGroupBounds(i, a)
			}
		}
		f0 += np
	}
}

// freshGroupBounds stores the group bounds of point i after a full scan
// found its centroid a: for group g, the better of the global lower bound
// and, by the triangle inequality, the distance from c_a to g's nearest
// member other than a (pruner.ccg) less the upper bound on the distance
// from the point to c_a. It costs a subtraction per group where scanning
// group by group cost a pass of the kernel per group; the bounds are
// looser only for the groups near c_a, which the next Step scans when it
// needs them.
func (kr *Kernel) freshGroupBounds(i int, a int32) {
	pr := kr.pr
	n := pr.groups.n
	l, ub := pr.l[i], pr.u[i]
	cc := pr.ccg[int(a)*n : int(a)*n+n]
	lbs := pr.glb[i*pr.gstride : i*pr.gstride+n]
	for g, c := range cc {
		b := l
		if t := c - ub; t > l { // then t > 0: ub ≥ 0, l ≥ 0
			b = pr.downPos(t)
		}
		lbs[g] = f32down(b)
	}
	pr.stamp[i] = pr.ver
}

// centroidGroupBounds fills pruner.ccg for the current centroids: for each
// centroid a and group g, a lower bound on the distance from c_a to every
// member of g other than a (+Inf when there is none), from the kernel's
// values of c_a against g's members, bounded as a point's would be.
func (kr *Kernel) centroidGroupBounds() {
	pr, d := kr.pr, kr.d
	gr := pr.groups
	pr.ccg = grow(pr.ccg, kr.k*gr.n)
	for a := range kr.k {
		x := kr.cent[a*d : a*d+d]
		xsq := pr.up(kr.cnorm[a])
		e := pr.errBound(xsq)
		for g := range gr.n {
			m, _, _ := gr.scan(x, d, g, int32(a))
			b := math.Inf(1)
			if !math.IsInf(m, 1) {
				b = pr.lowerDist(m, xsq, e)
			}
			pr.ccg[a*gr.n+g] = b
		}
	}
}

// b2i is 1 for true and 0 for false, without a branch.
func b2i(b bool) int {
	var n int
	if b {
		n = 1
	}
	return n
}
