// Package reduceinput is the allreduce case's data, shared by the test
// program that reduces it (testprog/semantics) and the tier that checks
// the result against an in-memory reduction of the same vectors.
package reduceinput

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Vector is rank r's vector: values over 30 orders of magnitude, so that
// the order of summation shows in the bits.
func Vector(r int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), 99))
	data := make([]float64, 257)
	for i := range data {
		data[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
	}
	return data
}

// Hex is v's bits in hex, for comparing sums exactly.
func Hex(v []float64) string {
	var b strings.Builder
	for _, x := range v {
		fmt.Fprintf(&b, "%016x", math.Float64bits(x))
	}
	return b.String()
}
