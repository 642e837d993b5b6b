package kmeans

import (
	"context"
	"math"

	"github.com/gaspigo/gaspigo/pgas"
)

// Seeding names how the starting centroids are chosen when no --init file
// is given.
type Seeding int

const (
	// SeedRandom takes k distinct points drawn uniformly (InitIndices).
	SeedRandom Seeding = iota
	// SeedPlusPlus is k-means++ (Arthur and Vassilvitskii 2007): the first
	// centroid is a uniform point, each next one a point drawn with
	// probability proportional to its squared distance to the nearest
	// centroid chosen so far.
	SeedPlusPlus
)

var seedingNames = [...]string{"random", "kmeans++"}

func (s Seeding) String() string { return enumName(seedingNames[:], int(s), "Seeding") }

// ParseSeeding parses "random" or "kmeans++".
func ParseSeeding(s string) (Seeding, error) {
	i, err := parseEnum(seedingNames[:], s, "seeding")
	return Seeding(i), err
}

// streamPlusPlus is the hash stream of k-means++'s draws.
const streamPlusPlus = 4

// The k-means++ draw is made without any sum over the points, so that it
// depends neither on the order in which points are visited nor on how
// they are sharded: draw c gives point i, with squared distance w_i > 0 to
// the nearest chosen centroid, the key E_i/w_i where E_i = −ln u_i is an
// exponential variate from a counter-based hash of (seed, c, i), and picks
// the smallest key (the lowest index among equal keys). The smallest of
// independent exponentials of rates w_i is that of point i with
// probability w_i/Σw (Efraimidis and Spirakis 2006). The minimum over all
// points is a minimum over shards and ranks in any order.

// ppBest is the running minimum of one k-means++ draw.
type ppBest struct {
	key float64
	idx int
}

func (b *ppBest) offer(key float64, idx int) {
	if key < b.key || (key == b.key && idx < b.idx) {
		b.key, b.idx = key, idx
	}
}

// ppScan lowers w (the squared distances of points [lo, lo+len(w)) to the
// nearest chosen centroid) with the centroid c just chosen, and offers the
// draw's keys of those points to b.
func ppScan(pts []float64, d, lo int, w, c []float64, key uint64, b *ppBest) {
	for i := range w {
		x := pts[i*d : i*d+d]
		var s float64
		for t, v := range x {
			e := v - c[t]
			s += e * e
		}
		wi := min(w[i], s)
		w[i] = wi
		if !(wi > 0) {
			continue // a chosen point (or a copy of one): never drawn again
		}
		g := lo + i
		u := float64(itemKey(key, uint64(g))>>11+1) * 0x1p-53 // (0, 1]
		// −ln u ≥ 1 − u: most points are ruled out without a logarithm.
		// The margin covers the rounding of both quotients, so the test
		// never skips a point that would win: the draw does not depend on
		// the order in which points are offered.
		if (1-u)/wi > b.key*(1+0x1p-40) {
			continue
		}
		b.offer(-math.Log(u)/wi, g)
	}
}

// ppFirst is k-means++'s first centroid: a uniform index of [0, n).
func ppFirst(seed uint64, n int) int {
	return int(below(draw(itemKey(streamKey(seed, streamPlusPlus), 0), 0), uint64(n)))
}

// ppKey is the hash key of draw c (c ≥ 1).
func ppKey(seed uint64, c int) uint64 {
	return itemKey(streamKey(seed, streamPlusPlus), uint64(c))
}

// InitPlusPlus is single-process k-means++ seeding of points (n*d): the
// same centroids as a distributed job with SeedPlusPlus and the same seed
// on any number of ranks and shards. When fewer than k distinct points
// exist, the remaining centroids repeat the first one.
func InitPlusPlus(points []float64, d, k int, seed uint64) ([]float64, error) {
	if d < 1 || len(points)%d != 0 || len(points) == 0 {
		return nil, shapeErr("InitPlusPlus: len(points) = %d is not a positive multiple of d = %d", len(points), d)
	}
	n := len(points) / d
	if k < 1 || k > n {
		return nil, shapeErr("InitPlusPlus: k = %d, want 1..%d", k, n)
	}
	cent := make([]float64, k*d)
	first := ppFirst(seed, n)
	copy(cent, points[first*d:first*d+d])
	w := make([]float64, n)
	for i := range w {
		w[i] = math.Inf(1)
	}
	for c := 1; c < k; c++ {
		b := ppBest{key: math.Inf(1), idx: -1}
		ppScan(points, d, 0, w, cent[(c-1)*d:c*d], ppKey(seed, c), &b)
		pick := first
		if b.idx >= 0 {
			pick = b.idx
		}
		copy(cent[c*d:c*d+d], points[pick*d:pick*d+d])
	}
	return cent, nil
}

// initPlusPlus is the distributed form: every rank scans its shards, the
// ranks agree on the smallest key with one allreduce per centroid, and the
// chosen point's row comes from the generator or from the rank holding it.
func (j *Job) initPlusPlus(ctx context.Context) error {
	k, d := j.opt.K, j.d
	ws := make([][]float64, len(j.mine))
	for s, sh := range j.mine {
		ws[s] = make([]float64, sh.hi-sh.lo)
		for i := range ws[s] {
			ws[s][i] = math.Inf(1)
		}
	}
	first := ppFirst(j.opt.Seed, j.n)
	if err := j.fetchRow(ctx, first, j.cent[:d]); err != nil {
		return err
	}
	v := make([]float64, 2)
	for c := 1; c < k; c++ {
		b := ppBest{key: math.Inf(1), idx: -1}
		key := ppKey(j.opt.Seed, c)
		for s, sh := range j.mine {
			ppScan(sh.pts, d, sh.lo, ws[s], j.cent[(c-1)*d:c*d], key, &b)
		}
		v[0], v[1] = b.key, float64(b.idx)
		err := pgas.AllreduceFunc(ctx, j.rt, nil, v, func(dst, src []float64) {
			if src[0] < dst[0] || (src[0] == dst[0] && src[1] >= 0 && (dst[1] < 0 || src[1] < dst[1])) {
				dst[0], dst[1] = src[0], src[1]
			}
		})
		if err != nil {
			return err
		}
		pick := first
		if v[1] >= 0 {
			pick = int(v[1])
		}
		if err := j.fetchRow(ctx, pick, j.cent[c*d:(c+1)*d]); err != nil {
			return err
		}
	}
	return nil
}

// fetchRow copies point i into dst on every rank: generated data is made
// locally, a file's row travels from the rank holding it (taken, not
// added, so the bits are the file's).
func (j *Job) fetchRow(ctx context.Context, i int, dst []float64) error {
	d := j.d
	if j.opt.Input == "" {
		return Generate(j.opt.Gen, i, i+1, dst)
	}
	row := make([]float64, d+1)
	for _, sh := range j.mine {
		if i >= sh.lo && i < sh.hi {
			row[0] = 1
			copy(row[1:], sh.pts[(i-sh.lo)*d:(i-sh.lo+1)*d])
		}
	}
	err := pgas.AllreduceFunc(ctx, j.rt, nil, row, func(dst, src []float64) {
		if src[0] == 1 {
			copy(dst, src)
		}
	})
	if err != nil {
		return err
	}
	copy(dst, row[1:])
	return nil
}
