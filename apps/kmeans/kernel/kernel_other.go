//go:build !amd64 || purego

package kernel

// No assembly kernels in this build: ImplAuto resolves to ImplGo.
var (
	hasAVX512 = false
	hasAVX2   = false
)

func asmArgmin(impl Impl, x []float64, np, d int, cp []float64, nb int, cn []float64, jbase float64, st []float64, best []int32, flags int) {
	panic("kmeans: internal error: no assembly kernels in this build")
}

func asmAccumulate(x []float64, d int, best, assign []int32, cent, sums []float64, counts []int64, k int) (float64, int64) {
	panic("kmeans: internal error: no assembly kernels in this build")
}

func asmArgmin2(x []float64, np, d int, cp []float64, nb int, cn []float64, jbase float64, st []float64, flags int) {
	panic("kmeans: internal error: no assembly kernels in this build")
}

func lanesTop2(st []float64, n int, out []float64) { lanesTop2Go(st, n, out) }

func ruleOut(lbs []float32, mv []float64, thr float64, scan []uint8) float64 {
	return ruleOutGo(lbs, mv, thr, scan)
}

var hasFMA = false

func ownValuesFMA(points *float64, d int, cpack *float64, cnorm *float64, idx *int32, pa *int32, n int, out *float64) {
	panic("kmeans: internal error: no assembly kernels in this build")
}
