package kernel

import "math"

// Partial is what one assignment pass over a shard contributes to the
// centroid update: per-cluster coordinate sums and point counts, the sum of
// squared distances of the points to their assigned centroids (SSE), and how
// many points changed cluster. Partials of different shards combine with
// Add; the distributed app allreduces Sums, Counts, SSE and Changed.
type Partial struct {
	K, D    int
	Sums    []float64 // K*D, row-major: cluster j's sum is Sums[j*D:(j+1)*D]
	Counts  []int64   // K
	SSE     float64
	Changed int64
}

// NewPartial returns a zeroed Partial for k clusters in d dimensions.
func NewPartial(k, d int) *Partial {
	return &Partial{K: k, D: d, Sums: make([]float64, k*d), Counts: make([]int64, k)}
}

// Reset zeroes p without reallocating.
func (p *Partial) Reset() {
	clear(p.Sums)
	clear(p.Counts)
	p.SSE = 0
	p.Changed = 0
}

// Add sets p = p + q element by element (q's values are added to p's, in
// that order, which is what makes a fixed combine order deterministic).
func (p *Partial) Add(q *Partial) error {
	if p.K != q.K || p.D != q.D || len(p.Sums) != len(q.Sums) || len(p.Counts) != len(q.Counts) {
		return shapeErr("adding a %dx%d partial to a %dx%d one", q.K, q.D, p.K, p.D)
	}
	for i, v := range q.Sums {
		p.Sums[i] += v
	}
	for i, v := range q.Counts {
		p.Counts[i] += v
	}
	p.SSE += q.SSE
	p.Changed += q.Changed
	return nil
}

func (p *Partial) shapeOK(k, d int) bool {
	return p != nil && p.K == k && p.D == d && len(p.Sums) == k*d && len(p.Counts) == k
}

// Update computes the new centroids from combined sums and counts:
// dst[j] = sums[j] / counts[j], and for an empty cluster (count 0) dst[j] =
// prev[j]: an empty cluster keeps its previous centroid. It returns the
// largest Euclidean distance any centroid moved. dst may alias prev. The
// arithmetic is fixed (IEEE division, fused multiply-adds in dimension order),
// so every rank computes the same bits from the same inputs.
func Update(dst, prev, sums []float64, counts []int64, k, d int) (maxShift float64, err error) {
	if k < 1 || d < 1 || len(dst) != k*d || len(prev) != k*d || len(sums) != k*d || len(counts) != k {
		return 0, shapeErr("Update: k=%d d=%d with len(dst)=%d len(prev)=%d len(sums)=%d len(counts)=%d",
			k, d, len(dst), len(prev), len(sums), len(counts))
	}
	var worst float64
	for j := 0; j < k; j++ {
		row := j * d
		if counts[j] == 0 {
			copy(dst[row:row+d], prev[row:row+d])
			continue
		}
		cnt := float64(counts[j])
		var s2 float64
		for t := 0; t < d; t++ {
			nv := sums[row+t] / cnt
			diff := nv - prev[row+t]
			s2 = math.FMA(diff, diff, s2)
			dst[row+t] = nv
		}
		if s2 > worst {
			worst = s2
		}
	}
	return math.Sqrt(worst), nil
}
