package kernel

import (
	"math"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

// fastImpls are the implementations that must agree bit for bit.
func fastImpls() []Impl {
	out := []Impl{ImplGo}
	for _, i := range []Impl{ImplAVX2, ImplAVX512} {
		if Available(i) {
			out = append(out, i)
		}
	}
	return out
}

type stepOut struct {
	assign []int32
	p      *Partial
}

func runStep(t *testing.T, pts []float64, d int, cent []float64, cfg Config) stepOut {
	t.Helper()
	k := len(cent) / d
	kr, err := NewKernel(pts, d, k, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	p := NewPartial(k, d)
	if err := kr.Step(cent, p); err != nil {
		t.Fatal(err)
	}
	return stepOut{append([]int32(nil), kr.Assignments()...), p}
}

func requireIdentical(t *testing.T, what string, a, b stepOut) {
	t.Helper()
	for i := range a.assign {
		if a.assign[i] != b.assign[i] {
			t.Fatalf("%s: point %d assigned to %d vs %d", what, i, a.assign[i], b.assign[i])
		}
	}
	if i := kmtest.SameBits(a.p.Sums, b.p.Sums); i != -1 {
		t.Fatalf("%s: sums differ at %d", what, i)
	}
	for j := range a.p.Counts {
		if a.p.Counts[j] != b.p.Counts[j] {
			t.Fatalf("%s: count %d: %d vs %d", what, j, a.p.Counts[j], b.p.Counts[j])
		}
	}
	if math.Float64bits(a.p.SSE) != math.Float64bits(b.p.SSE) || a.p.Changed != b.p.Changed {
		t.Fatalf("%s: SSE %v vs %v, changed %d vs %d", what, a.p.SSE, b.p.SSE, a.p.Changed, b.p.Changed)
	}
}

func sqDist(x, c []float64) float64 {
	s := 0.0
	for t := range x {
		diff := x[t] - c[t]
		s += diff * diff
	}
	return s
}

func norm2(x []float64) float64 { return sqDist(x, make([]float64, len(x))) }
