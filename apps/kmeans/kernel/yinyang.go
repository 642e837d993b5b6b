package kernel

import (
	"math"
)

// groupSize is the mean number of centroids per AlgoYinyang group.
const groupSize = 64

// groups partitions the centroids into nearby sets for AlgoYinyang. Only
// speed depends on the partition; any partition gives the same bits.
type groups struct {
	n     int       // number of groups
	of    []int32   // k: the group of each centroid
	size  []int32   // n: the members of each group
	blk   []int     // n+1: group g's packed blocks are [blk[g], blk[g+1])
	idx   []int32   // packed position -> centroid index (-1: padding)
	pos   []int32   // k: centroid index -> packed position
	pack  []float64 // the centroids' −2c in group order, blocks of lanes as in Kernel.cpack
	norm  []float64 // their ||c||² (+Inf for padding)
	dummy bool
}

// numGroups is the number of groups newGroups starts from (empty ones
// are dropped), the most a Kernel has.
func numGroups(k int) int { return max(1, k/groupSize) }

// newGroups clusters the k centroids c into about k/groupSize groups with
// a few rounds of Lloyd's algorithm on the centroids themselves (starting
// from evenly spaced centroids), and lays each group out in blocks of
// lanes, members in ascending index (so that, within a group, the first
// of equal values is the lowest index).
func newGroups(c []float64, k, d int) *groups {
	ng := numGroups(k)
	ctr := make([]float64, ng*d)
	for g := 0; g < ng; g++ {
		j := g * k / ng
		copy(ctr[g*d:g*d+d], c[j*d:j*d+d])
	}
	of := make([]int32, k)
	sums := make([]float64, ng*d)
	cnt := make([]int, ng)
	for round := 0; round < 5; round++ {
		clear(sums)
		clear(cnt)
		for j := 0; j < k; j++ {
			bg, bd := 0, math.Inf(1)
			for g := 0; g < ng; g++ {
				if dd := sqDistRow(c[j*d:j*d+d], ctr[g*d:g*d+d]); dd < bd {
					bg, bd = g, dd
				}
			}
			of[j] = int32(bg)
			cnt[bg]++
			for t := 0; t < d; t++ {
				sums[bg*d+t] += c[j*d+t]
			}
		}
		for g := 0; g < ng; g++ {
			if cnt[g] > 0 {
				for t := 0; t < d; t++ {
					ctr[g*d+t] = sums[g*d+t] / float64(cnt[g])
				}
			}
		}
	}
	// Renumber the non-empty groups densely.
	dense := make([]int32, ng)
	n := 0
	for g := 0; g < ng; g++ {
		dense[g] = -1
		if cnt[g] > 0 {
			dense[g] = int32(n)
			n++
		}
	}
	gr := &groups{n: n, of: of, blk: make([]int, n+1)}
	members := make([][]int32, n)
	for j := 0; j < k; j++ {
		of[j] = dense[of[j]]
		members[of[j]] = append(members[of[j]], int32(j))
	}
	gr.size = make([]int32, n)
	for g := range members {
		gr.size[g] = int32(len(members[g]))
	}
	for g := 0; g < n; g++ {
		gr.blk[g+1] = gr.blk[g] + (len(members[g])+lanes-1)/lanes
	}
	np := gr.blk[n] * lanes
	gr.idx = make([]int32, np)
	for i := range gr.idx {
		gr.idx[i] = -1
	}
	gr.pos = make([]int32, k)
	for g := 0; g < n; g++ {
		copy(gr.idx[gr.blk[g]*lanes:], members[g])
		for i, j := range members[g] {
			gr.pos[j] = int32(gr.blk[g]*lanes + i)
		}
	}
	gr.pack = make([]float64, np*d)
	gr.norm = make([]float64, np)
	return gr
}

func sqDistRow(x, c []float64) float64 {
	var s float64
	for t := range x {
		e := x[t] - c[t]
		s += e * e
	}
	return s
}

// fill copies the packed centroids of the kernel into group order: the
// same −2c and ||c||² bits.
func (gr *groups) fill(kr *Kernel) {
	d := kr.d
	for p, j := range gr.idx {
		b, l := p/lanes, p%lanes
		if j < 0 {
			gr.norm[p] = math.Inf(1)
			for t := 0; t < d; t++ {
				gr.pack[(b*d+t)*lanes+l] = 0
			}
			continue
		}
		jb, jl := int(j)/lanes, int(j)%lanes
		gr.norm[p] = kr.cnorm[j]
		for t := 0; t < d; t++ {
			gr.pack[(b*d+t)*lanes+l] = kr.cpack[(jb*d+t)*lanes+jl]
		}
	}
}

// scan evaluates v̂ for every member of group g except skip and returns
// the smallest (m1, at index i1, the lowest index among equal values) and
// the second smallest (m2); +Inf and -1 when there is none.
func (gr *groups) scan(x []float64, d, g int, skip int32) (m1 float64, i1 int32, m2 float64) {
	m1, m2, i1 = math.Inf(1), math.Inf(1), -1
	for b := gr.blk[g]; b < gr.blk[g+1]; b++ {
		blk := gr.pack[b*d*lanes : (b+1)*d*lanes]
		nrm := gr.norm[b*lanes : (b+1)*lanes]
		a0, a1, a2, a3, a4, a5, a6, a7 := nrm[0], nrm[1], nrm[2], nrm[3], nrm[4], nrm[5], nrm[6], nrm[7]
		for t, u := range x {
			c := blk[t*lanes : t*lanes+lanes]
			a0 = math.FMA(u, c[0], a0)
			a1 = math.FMA(u, c[1], a1)
			a2 = math.FMA(u, c[2], a2)
			a3 = math.FMA(u, c[3], a3)
			a4 = math.FMA(u, c[4], a4)
			a5 = math.FMA(u, c[5], a5)
			a6 = math.FMA(u, c[6], a6)
			a7 = math.FMA(u, c[7], a7)
		}
		for l, v := range [lanes]float64{a0, a1, a2, a3, a4, a5, a6, a7} {
			j := gr.idx[b*lanes+l]
			if j < 0 || j == skip {
				continue
			}
			if v < m1 {
				m2, m1, i1 = m1, v, j
			} else if v < m2 {
				m2 = v
			}
		}
	}
	return m1, i1, m2
}

// f32down rounds a non-negative bound down to float32.
func f32down(x float64) float32 {
	if x <= 0 {
		return 0
	}
	f := float32(x)
	if float64(f) > x {
		// f > 0: the next float32 toward 0 is one ulp down (from +Inf,
		// the largest finite one), as math.Nextafter32(f, 0) gives.
		f = math.Float32frombits(math.Float32bits(f) - 1)
	}
	return f
}

// yinyangPrepare starts a new version of the centroids (after prepare):
// each group's largest drift, added to the running sums.
func (kr *Kernel) yinyangPrepare() {
	pr := kr.pr
	gr := pr.groups
	if !pr.have {
		return // the first version: nothing moved, no bounds yet
	}
	clear(pr.gdrift)
	for j := 0; j < kr.k; j++ {
		g := gr.of[j]
		pr.gdrift[g] = max(pr.gdrift[g], pr.drift[j])
	}
	prev := int(pr.ver%pr.hist) * gr.n
	pr.ver++
	cur := int(pr.ver%pr.hist) * gr.n
	for g, dg := range pr.gdrift {
		pr.cumUp[cur+g] = pr.up(pr.cumUp[prev+g] + dg)
		pr.cumLo[cur+g] = pr.down(pr.cumLo[prev+g] + dg)
	}
}
