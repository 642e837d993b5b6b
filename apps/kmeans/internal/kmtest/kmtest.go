// Package kmtest holds what the tests of the K-means packages (the kernel,
// the point files and the job) share: random points and a comparison of
// float64 slices bit for bit. It is imported by test files only.
package kmtest

import (
	"math"
	"math/rand/v2"
)

// RandPoints returns n*d normal values from a seeded RNG.
func RandPoints(seed uint64, n, d int) []float64 {
	r := rand.New(rand.NewPCG(seed, 99))
	p := make([]float64, n*d)
	for i := range p {
		p[i] = r.NormFloat64()
	}
	return p
}

// SameBits returns -1 when a and b hold the same float64 bits, else the
// first index where they differ (0 when their lengths differ).
func SameBits(a, b []float64) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return i
		}
	}
	return -1
}
