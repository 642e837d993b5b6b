package kernel

import (
	"fmt"
	"math"
	"math/bits"
)

// MaxDim bounds the dimension accepted by the generator and the file readers
// (a guard against absurd headers, not a limit of the algorithm).
const MaxDim = 1 << 16

// GenConfig describes a synthetic data set of Gaussian blobs. Point i is a
// pure function of (Seed, i, D, Blobs, Spread, Sigma): any rank can generate
// any range [lo, hi) on its own and the data set is the same whatever the
// number of ranks. The arithmetic is integer hashing plus one fused
// multiply-add per coordinate, so it is also the same on every platform.
type GenConfig struct {
	// Seed selects the data set.
	Seed uint64
	// N is the number of points in the whole data set.
	N int
	// D is the dimension, 1..MaxDim.
	D int
	// Blobs is the number of blob centres, ≥ 1 (the "true" k).
	Blobs int
	// Spread: blob centres are uniform in [-Spread, Spread]^D (data units).
	Spread float64
	// Sigma is the standard deviation of every coordinate around its blob
	// centre (data units). The noise is a sum of twelve uniforms (Irwin–Hall),
	// which is Gaussian to within ±6 Sigma.
	Sigma float64
}

// DefaultGenConfig is the data set of the paper's experiments: 1M points in
// 10 dimensions, here drawn around 10 blob centres.
func DefaultGenConfig() GenConfig {
	return GenConfig{Seed: 1, N: 1_000_000, D: 10, Blobs: 10, Spread: 10, Sigma: 1}
}

// LocalGenConfig is a small data set for tests and quick runs.
func LocalGenConfig() GenConfig {
	c := DefaultGenConfig()
	c.N = 10_000
	return c
}

// Validate checks the fields; it never changes g.
func (g GenConfig) Validate() error {
	switch {
	case g.N < 1:
		return configErr("generator N = %d, want ≥ 1", g.N)
	case g.D < 1 || g.D > MaxDim:
		return configErr("generator D = %d, want 1..%d", g.D, MaxDim)
	case g.Blobs < 1 || g.Blobs > 1<<24:
		return configErr("generator Blobs = %d, want 1..%d", g.Blobs, 1<<24)
	case !(g.Spread >= 0) || math.IsInf(g.Spread, 0):
		return configErr("generator Spread = %v, want a finite value ≥ 0", g.Spread)
	case !(g.Sigma >= 0) || math.IsInf(g.Sigma, 0):
		return configErr("generator Sigma = %v, want a finite value ≥ 0", g.Sigma)
	case float64(g.N)*float64(g.D) > math.MaxInt/16:
		return configErr("generator N*D = %d*%d is too large", g.N, g.D)
	}
	return nil
}

const (
	golden  = 0x9e3779b97f4a7c15 // 2^64 / φ, the splitmix64 increment
	streamC = 0xd1b54a32d192ed03
)

// mix64 is the splitmix64 output function (a bijection with good avalanche).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// streamKey derives the key of hash stream s under seed.
func streamKey(seed, s uint64) uint64 { return mix64(seed ^ mix64(s*streamC+golden)) }

// itemKey derives the key of item i of a stream.
func itemKey(key, i uint64) uint64 { return mix64(key + i*golden) }

// draw returns the r-th 64-bit draw of an item: splitmix64 at counter r+1
// from the item key. Counter-based, so any draw is computed without the
// ones before it.
func draw(item, r uint64) uint64 { return mix64(item + (r+1)*golden) }

// Hash streams.
const (
	streamCentre = 1
	streamPoint  = 2
	streamInit   = 3
)

// unit53 maps 64 random bits to [0, 1) with 53 bits of precision.
func unit53(h uint64) float64 { return float64(h>>11) * (1.0 / (1 << 53)) }

// below maps 64 random bits to [0, n) without division bias worth noting.
func below(h uint64, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}

// Centres returns the Blobs*D blob centres, row-major.
func (g GenConfig) Centres() ([]float64, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	c := make([]float64, g.Blobs*g.D)
	key := streamKey(g.Seed, streamCentre)
	for i := range c {
		u := unit53(draw(itemKey(key, uint64(i)), 0))
		c[i] = math.FMA(2*g.Spread, u, -g.Spread)
	}
	return c, nil
}

// Blob returns which blob point i is drawn around.
func (g GenConfig) Blob(i int) int {
	return g.blob(itemKey(streamKey(g.Seed, streamPoint), uint64(i)))
}

func (g GenConfig) blob(item uint64) int { return int(below(draw(item, 0), uint64(g.Blobs))) }

// Generate writes points [lo, hi) of the data set into dst, which must have
// length (hi-lo)*D. Concatenating the outputs for [0, a) and [a, N) gives
// exactly the output for [0, N).
func Generate(g GenConfig, lo, hi int, dst []float64) error {
	centres, err := g.Centres()
	if err != nil {
		return err
	}
	if lo < 0 || hi < lo || hi > g.N {
		return rangeErr(lo, hi, g.N)
	}
	if len(dst) != (hi-lo)*g.D {
		return shapeErr("Generate: len(dst) = %d, want (hi-lo)*D = %d*%d", len(dst), hi-lo, g.D)
	}
	d := g.D
	key := streamKey(g.Seed, streamPoint)
	for i := lo; i < hi; i++ {
		item := itemKey(key, uint64(i))
		b := g.blob(item)
		ctr := centres[b*d : b*d+d]
		row := dst[(i-lo)*d : (i-lo)*d+d]
		for t := range row {
			// Twelve 16-bit uniforms from three draws; their centred sum
			// has variance ≈ 1 (Irwin–Hall). Integer arithmetic: exact.
			var s int64
			for r := 0; r < 3; r++ {
				h := draw(item, uint64(1+t*3+r))
				s += int64(h&0xffff) + int64(h>>16&0xffff) + int64(h>>32&0xffff) + int64(h>>48)
			}
			z := float64(2*s-12*65535) / 131072
			row[t] = math.FMA(g.Sigma, z, ctr[t])
		}
	}
	return nil
}

func rangeErr(lo, hi, n int) error {
	return fmt.Errorf("%w: [%d, %d) is not inside [0, %d)", ErrRange, lo, hi, n)
}
