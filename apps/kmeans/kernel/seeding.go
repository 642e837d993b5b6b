package kernel

import "math"

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

// PlusPlusDraw is draw c (c ≥ 1) of k-means++ under a seed, in progress:
// Key is the smallest key offered so far and Index its point (-1: none
// yet). Draws over disjoint sets of points combine by taking the smaller
// key, the lower index among equal keys: the result is the draw over
// their union, whatever the order.
type PlusPlusDraw struct {
	Key   float64
	Index int
	hash  uint64 // the hash key of the draw
}

// NewPlusPlusDraw starts draw c (c ≥ 1) of k-means++ under seed.
func NewPlusPlusDraw(seed uint64, c int) PlusPlusDraw {
	return PlusPlusDraw{Key: math.Inf(1), Index: -1, hash: itemKey(streamKey(seed, streamPlusPlus), uint64(c))}
}

func (b *PlusPlusDraw) offer(key float64, idx int) {
	if key < b.Key || (key == b.Key && idx < b.Index) {
		b.Key, b.Index = key, idx
	}
}

// Scan lowers w (the squared distances of points [lo, lo+len(w)) of the
// data set, pts holding them row-major, to the nearest chosen centroid;
// +Inf before the first) with the centroid c chosen last, and offers the
// draw's keys of those points.
func (b *PlusPlusDraw) Scan(pts []float64, d, lo int, w, c []float64) {
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
		u := float64(itemKey(b.hash, uint64(g))>>11+1) * 0x1p-53 // (0, 1]
		// −ln u ≥ 1 − u: most points are ruled out without a logarithm.
		// The margin covers the rounding of both quotients, so the test
		// never skips a point that would win: the draw does not depend on
		// the order in which points are offered.
		if (1-u)/wi > b.Key*(1+0x1p-40) {
			continue
		}
		b.offer(-math.Log(u)/wi, g)
	}
}

// PlusPlusFirst is k-means++'s first centroid under seed: a uniform index
// of [0, n).
func PlusPlusFirst(seed uint64, n int) int {
	return int(below(draw(itemKey(streamKey(seed, streamPlusPlus), 0), 0), uint64(n)))
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
	first := PlusPlusFirst(seed, n)
	copy(cent, points[first*d:first*d+d])
	w := make([]float64, n)
	for i := range w {
		w[i] = math.Inf(1)
	}
	for c := 1; c < k; c++ {
		b := NewPlusPlusDraw(seed, c)
		b.Scan(points, d, 0, w, cent[(c-1)*d:c*d])
		pick := first
		if b.Index >= 0 {
			pick = b.Index
		}
		copy(cent[c*d:c*d+d], points[pick*d:pick*d+d])
	}
	return cent, nil
}
