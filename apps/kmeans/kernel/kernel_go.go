package kernel

import (
	"math"
)

// accumulateGo adds each point to the sums of its cluster, counts it,
// notes whether its cluster changed, and sums the direct squared distances
// to the assigned centroids (SSE is computed directly, not from the
// expansion, so it is accurate and never negative). The distance of one
// point is summed in four interleaved partial sums over the first d&^3
// dimensions, combined as (p0+p2)+(p1+p3), then the remaining dimensions
// are added in order; no operation is fused (explicit float64
// conversions), so every platform and the AVX2 accumulation round the same.
func accumulateGo(x []float64, d int, best, assign []int32, cent, sums []float64, counts []int64) (sse float64, changed int64) {
	dv := d &^ 3
	for i, a := range best {
		if assign[i] != a {
			assign[i] = a
			changed++
		}
		counts[a]++
		row := int(a) * d
		xi := x[i*d : i*d+d]
		c := cent[row : row+d]
		s := sums[row : row+d]
		var p0, p1, p2, p3 float64
		t := 0
		for ; t < dv; t += 4 {
			x0, x1, x2, x3 := xi[t], xi[t+1], xi[t+2], xi[t+3]
			s[t] += x0
			s[t+1] += x1
			s[t+2] += x2
			s[t+3] += x3
			e0, e1, e2, e3 := x0-c[t], x1-c[t+1], x2-c[t+2], x3-c[t+3]
			p0 += float64(e0 * e0)
			p1 += float64(e1 * e1)
			p2 += float64(e2 * e2)
			p3 += float64(e3 * e3)
		}
		dist := (p0 + p2) + (p1 + p3)
		for ; t < d; t++ {
			s[t] += xi[t]
			e := xi[t] - c[t]
			dist += float64(e * e)
		}
		sse += dist
	}
	return sse, changed
}

// argminNaive is the reference: direct squared distances, strict "<" in
// index order (ties go to the lowest index).
func argminNaive(x []float64, d int, cent []float64, k int, best []int32) {
	for i := range best {
		p := x[i*d : i*d+d]
		bj, bv := 0, math.Inf(1)
		for j := 0; j < k; j++ {
			c := cent[j*d : j*d+d]
			var s float64
			for t := range p {
				diff := p[t] - c[t]
				s += diff * diff
			}
			if s < bv {
				bj, bv = j, s
			}
		}
		best[i] = int32(bj)
	}
}

// argminGo is the blocked pure-Go norm-expansion kernel: two points at a
// time against four centroids at a time (eight independent accumulators),
// value(j) = FMA chain over t of x_t * (-2 c_jt) starting from ||c_j||².
// Groups of four that are all padding (index ≥ k) are skipped. With
// GOAMD64=v1 every math.FMA carries a run-time CPU check, which costs about
// half the speed; GOAMD64=v3 and arm64 use the instruction directly.
func argminGo(x []float64, d, k int, cpack, cnorm []float64, best []int32) {
	np := len(best)
	kpad := len(cnorm)
	nb := kpad / lanes
	inf := math.Inf(1)
	i := 0
	for ; i+2 <= np; i += 2 {
		p0 := x[i*d : i*d+d]
		p1 := x[i*d+d : i*d+2*d]
		b0, b1 := inf, inf
		j0, j1 := 0, 0
		for b := 0; b < nb; b++ {
			blk := cpack[b*d*lanes : (b+1)*d*lanes]
			for h := 0; h < lanes && b*lanes+h < k; h += 4 { // skip all-padding halves
				n := cnorm[b*lanes+h : b*lanes+h+4]
				a0, a1, a2, a3 := n[0], n[1], n[2], n[3]
				e0, e1, e2, e3 := a0, a1, a2, a3
				for t := 0; t < d; t++ {
					c := blk[t*lanes+h : t*lanes+h+4]
					u, v := p0[t], p1[t]
					a0 = math.FMA(u, c[0], a0)
					a1 = math.FMA(u, c[1], a1)
					a2 = math.FMA(u, c[2], a2)
					a3 = math.FMA(u, c[3], a3)
					e0 = math.FMA(v, c[0], e0)
					e1 = math.FMA(v, c[1], e1)
					e2 = math.FMA(v, c[2], e2)
					e3 = math.FMA(v, c[3], e3)
				}
				j := b*lanes + h
				if a0 < b0 {
					b0, j0 = a0, j
				}
				if a1 < b0 {
					b0, j0 = a1, j+1
				}
				if a2 < b0 {
					b0, j0 = a2, j+2
				}
				if a3 < b0 {
					b0, j0 = a3, j+3
				}
				if e0 < b1 {
					b1, j1 = e0, j
				}
				if e1 < b1 {
					b1, j1 = e1, j+1
				}
				if e2 < b1 {
					b1, j1 = e2, j+2
				}
				if e3 < b1 {
					b1, j1 = e3, j+3
				}
			}
		}
		best[i], best[i+1] = int32(j0), int32(j1)
	}
	for ; i < np; i++ {
		p0 := x[i*d : i*d+d]
		b0, j0 := inf, 0
		for b := 0; b < nb; b++ {
			blk := cpack[b*d*lanes : (b+1)*d*lanes]
			for h := 0; h < lanes && b*lanes+h < k; h += 4 { // skip all-padding halves
				n := cnorm[b*lanes+h : b*lanes+h+4]
				a0, a1, a2, a3 := n[0], n[1], n[2], n[3]
				for t := 0; t < d; t++ {
					c := blk[t*lanes+h : t*lanes+h+4]
					u := p0[t]
					a0 = math.FMA(u, c[0], a0)
					a1 = math.FMA(u, c[1], a1)
					a2 = math.FMA(u, c[2], a2)
					a3 = math.FMA(u, c[3], a3)
				}
				j := b*lanes + h
				if a0 < b0 {
					b0, j0 = a0, j
				}
				if a1 < b0 {
					b0, j0 = a1, j+1
				}
				if a2 < b0 {
					b0, j0 = a2, j+2
				}
				if a3 < b0 {
					b0, j0 = a3, j+3
				}
			}
		}
		best[i] = int32(j0)
	}
}
