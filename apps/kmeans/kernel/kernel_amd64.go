//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// CPU features, detected once at start-up. x/sys/cpu also checks that the
// operating system saves the wide registers (XGETBV).
var (
	hasAVX512 = cpu.X86.HasAVX512F
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
)

// argminAVX512 scans nb packed centroid blocks at cp (norms at cn; jbase is
// the index of the first centroid) for np points (np a multiple of 4) at x
// with dimension d. Per point it keeps a running state of 8 lane minima and
// their centroid indices (as float64; 16 float64 per point in state).
// flags&asmFirst: start from an empty state instead of loading it.
// flags&asmLast: reduce the state and store each point's nearest centroid in
// best instead of storing the state.
//
//go:noescape
func argminAVX512(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, best *int32, flags int)

// argminAVX2 is argminAVX512 for AVX2+FMA: np a multiple of 2, and 4 lanes
// of state (8 float64 per point).
//
//go:noescape
func argminAVX2(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, best *int32, flags int)

func asmArgmin(impl Impl, x []float64, np, d int, cp []float64, nb int, cn []float64, jbase float64, st []float64, best []int32, flags int) {
	// The callers guarantee the lengths; check them anyway so a bug can
	// never turn into an out-of-bounds access in assembly.
	width, group := 8, 4
	if impl == ImplAVX2 {
		width, group = 4, 2
	}
	if np <= 0 || np%group != 0 || d < 1 || nb < 1 || len(x) < np*d || len(cp) < nb*d*lanes ||
		len(cn) < nb*lanes || len(st) < np*2*width || len(best) < np {
		panic("kmeans: internal error: bad assembly kernel arguments")
	}
	switch impl {
	case ImplAVX512:
		argminAVX512(&x[0], np, d, &cp[0], nb, &cn[0], jbase, &st[0], &best[0], flags)
	case ImplAVX2:
		argminAVX2(&x[0], np, d, &cp[0], nb, &cn[0], jbase, &st[0], &best[0], flags)
	default:
		panic("kmeans: internal error: no assembly kernel for " + impl.String())
	}
}

// accumulateAVX2 is accumulateGo in assembly (AVX2, same rounding); it
// returns changed = -1 if an index in best is outside [0, k).
//
//go:noescape
func accumulateAVX2(x *float64, n, d int, best, assign *int32, cent, sums *float64, counts *int64, k int) (sse float64, changed int64)

func asmAccumulate(x []float64, d int, best, assign []int32, cent, sums []float64, counts []int64, k int) (float64, int64) {
	n := len(best)
	if n == 0 {
		return 0, 0
	}
	if d < 1 || k < 1 || len(x) < n*d || len(assign) < n || len(cent) < k*d || len(sums) < k*d || len(counts) < k {
		panic("kmeans: internal error: bad accumulate arguments")
	}
	sse, changed := accumulateAVX2(&x[0], n, d, &best[0], &assign[0], &cent[0], &sums[0], &counts[0], k)
	if changed < 0 {
		panic("kmeans: internal error: cluster index out of range")
	}
	return sse, changed
}

// argmin2AVX512 is argminAVX512 that also keeps each lane's second
// smallest value and always stores the state, 24 float64 per point: 8 lane
// minima, their indices, 8 lane second minima. flags&asmFirst starts from
// an empty state instead of loading it.
//
//go:noescape
func argmin2AVX512(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, flags int)

func asmArgmin2(x []float64, np, d int, cp []float64, nb int, cn []float64, jbase float64, st []float64, flags int) {
	if np <= 0 || np%4 != 0 || d < 1 || nb < 1 || len(x) < np*d || len(cp) < nb*d*lanes ||
		len(cn) < nb*lanes || len(st) < np*3*lanes {
		panic("kmeans: internal error: bad assembly kernel arguments")
	}
	argmin2AVX512(&x[0], np, d, &cp[0], nb, &cn[0], jbase, &st[0], flags)
}

// laneTop2AVX512 is laneTop2 for n states at st (24 float64 each), writing
// v1, at, v2 of each to out (3 float64 each).
//
//go:noescape
func laneTop2AVX512(st *float64, n int, out *float64)

// lanesTop2 runs laneTop2 over the first n states of st into out (3
// values per state), in assembly where the CPU has AVX-512.
func lanesTop2(st []float64, n int, out []float64) {
	if n <= 0 {
		return
	}
	if len(st) < n*3*lanes || len(out) < n*3 {
		panic("kmeans: internal error: bad lanesTop2 arguments")
	}
	if hasAVX512 {
		laneTop2AVX512(&st[0], n, &out[0])
		return
	}
	lanesTop2Go(st, n, out)
}

// ruleOutAVX512 is ruleOutGo over n8 blocks of 8 groups.
//
//go:noescape
func ruleOutAVX512(lbs *float32, mv *float64, n8 int, thr float64, scan *uint8) float64

// ruleOut is ruleOutGo, in assembly where the CPU has AVX-512.
func ruleOut(lbs []float32, mv []float64, thr float64, scan []uint8) float64 {
	n8 := len(lbs) / 8
	if !hasAVX512 || n8 == 0 {
		return ruleOutGo(lbs, mv, thr, scan)
	}
	if len(lbs)%8 != 0 || len(mv) < len(lbs) || len(scan) < n8 {
		panic("kmeans: internal error: bad ruleOut arguments")
	}
	return ruleOutAVX512(&lbs[0], &mv[0], n8, thr, &scan[0])
}

// ownValuesFMA is the loop of ownValues in assembly (values_amd64.s).
//
//go:noescape
func ownValuesFMA(points *float64, d int, cpack *float64, cnorm *float64, idx *int32, pa *int32, n int, out *float64)

// hasFMA is whether ownValuesFMA can run: Go code calls math.FMA behind a
// test of the processor at each call, and spills its registers around
// the fallback.
var hasFMA = cpu.X86.HasFMA
