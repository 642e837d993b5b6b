package kernel

import (
	"math"
)

// top2 is a full scan of the np points in w.gbuf: per point the centroid
// the brute-force kernel picks (w.tbest; the smallest v̂, ties to the
// lowest index), its v̂ (w.v1) and the smallest v̂ of all other centroids
// (w.v2). The assembly kernels scan the centroids in sub-groups of
// subBlocks blocks, keeping their per-lane minima (state without the final
// reduction); the other members of the winner's lane in its sub-group are
// then evaluated one by one.
func (kr *Kernel) top2(w *worker, np int) {
	d := kr.d
	x := w.gbuf[:np*d]
	if kr.impl != ImplAVX512 && kr.impl != ImplAVX2 {
		for q := 0; q < np; q++ {
			w.tbest[q], w.v1[q], w.v2[q] = kr.top2Go(x[q*d : q*d+d])
		}
		return
	}
	if kr.impl == ImplAVX512 {
		kr.top2AVX512(w, np)
		return
	}
	group, width := 4, lanes
	if kr.impl == ImplAVX2 {
		group, width = 2, 4
	}
	npad := w.pad(np, d, group)
	inf := math.Inf(1)
	for q := 0; q < np; q++ {
		w.v1[q], w.v2[q], w.tbest[q], w.tsub[q] = inf, inf, -1, 0
	}
	nb := kr.kpad / lanes
	sb := min(subBlocks, kr.chunkBlocks)
	st := w.state[:npad*2*width]
	for b0 := 0; b0 < nb; b0 += sb {
		cnt := min(sb, nb-b0)
		asmArgmin(kr.impl, w.gbuf[:npad*d], npad, d, kr.cpack[b0*d*lanes:(b0+cnt)*d*lanes], cnt,
			kr.cnorm[b0*lanes:(b0+cnt)*lanes], float64(b0*lanes), st, w.best[:npad], asmFirst)
		for q := 0; q < np; q++ {
			s := st[q*2*width : (q+1)*2*width]
			bv, bi, v2 := w.v1[q], w.tbest[q], w.v2[q]
			for r := 0; r < width; r++ {
				v := s[r]
				if v == inf {
					continue
				}
				j := int32(s[width+r])
				if v < bv || (v == bv && j < bi) {
					v2 = min(v2, bv)
					bv, bi = v, j
					w.tsub[q] = int32(b0)
				} else {
					v2 = min(v2, v)
				}
			}
			w.v1[q], w.tbest[q], w.v2[q] = bv, bi, v2
		}
	}
	// The winner's lane in its sub-group held only its own minimum: the
	// other centroids of that lane and sub-group are evaluated here.
	for q := 0; q < np; q++ {
		a := int(w.tbest[q])
		b0 := int(w.tsub[q])
		xq := x[q*d : q*d+d]
		v2 := w.v2[q]
		for j := b0 * lanes; j < min((b0+sb)*lanes, kr.k); j++ {
			if j != a && (j-a)%width == 0 {
				v2 = min(v2, kr.value(xq, j))
			}
		}
		w.v2[q] = v2
	}
}

// top2AVX512 is top2 with the AVX-512 kernel that keeps each lane's two
// smallest values: the winner is the smallest lane minimum (ties to the
// lowest index), the runner-up the smaller of the winner's lane's second
// minimum and the other lanes' minima.
func (kr *Kernel) top2AVX512(w *worker, np int) {
	d := kr.d
	npad := w.pad(np, d, 4)
	st := w.state[:npad*3*lanes]
	nb := kr.kpad / lanes
	for b0 := 0; b0 < nb; b0 += kr.chunkBlocks {
		cnt := min(kr.chunkBlocks, nb-b0)
		flags := 0
		if b0 == 0 {
			flags = asmFirst
		}
		asmArgmin2(w.gbuf[:npad*d], npad, d, kr.cpack[b0*d*lanes:(b0+cnt)*d*lanes], cnt,
			kr.cnorm[b0*lanes:(b0+cnt)*lanes], float64(b0*lanes), st, flags)
	}
	t3 := w.t3[:3*np]
	lanesTop2(st, np, t3)
	for q := 0; q < np; q++ {
		w.tbest[q], w.v1[q], w.v2[q] = int32(t3[3*q+1]), t3[3*q], t3[3*q+2]
	}
}

// laneTop2 reduces one point's state of the two-smallest kernel (lane
// minima, their indices, lane second minima): the smallest minimum (ties
// to the lowest index) with its index, and the runner-up, the smaller of
// that lane's second minimum and the other lanes' minima.
func laneTop2(s []float64) (v1, at, v2 float64) {
	s = s[:3*lanes]
	r := 0
	for l := 1; l < lanes; l++ {
		if s[l] < s[r] || (s[l] == s[r] && s[lanes+l] < s[lanes+r]) {
			r = l
		}
	}
	// Comparisons rather than min, which would also order NaNs and
	// signed zeros: the kernel's values are finite or +Inf.
	v2 = s[2*lanes+r]
	for l := 0; l < lanes; l++ {
		if l != r && s[l] < v2 {
			v2 = s[l]
		}
	}
	return s[r], s[lanes+r], v2
}

// lanesTop2Go is lanesTop2 in Go: laneTop2 per state.
func lanesTop2Go(st []float64, n int, out []float64) {
	for q := range n {
		out[3*q], out[3*q+1], out[3*q+2] = laneTop2(st[q*3*lanes : (q+1)*3*lanes])
	}
}

// pad fills w.gbuf up to a multiple of group points (the assembly
// kernels' point group) with copies of the last of its np points, and
// returns the padded count.
func (w *worker) pad(np, d, group int) int {
	npad := (np + group - 1) / group * group
	for q := np; q < npad; q++ {
		copy(w.gbuf[q*d:q*d+d], w.gbuf[(np-1)*d:np*d])
	}
	return npad
}

// top2Go is top2 for one point without assembly: every v̂ in index order.
func (kr *Kernel) top2Go(x []float64) (best int32, v1, v2 float64) {
	v1, v2 = math.Inf(1), math.Inf(1)
	for j := 0; j < kr.k; j++ {
		v := kr.value(x, j)
		if v < v1 {
			v2, v1, best = v1, v, int32(j)
		} else if v < v2 {
			v2 = v
		}
	}
	return best, v1, v2
}
