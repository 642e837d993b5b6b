package kernel

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// peakGFLOPS is the FP64 arithmetic peak of one core of the reference
// machine (docs/design.md §12.4: ~120 GFLOP/s with AVX-512 FMA).
const peakGFLOPS = 120.0

var (
	benchMu     sync.Mutex
	benchCache  = map[[2]int][]float64{}
	naiveRateMu sync.Mutex
	naiveRate   = map[string]float64{}
)

// clock measures a benchmark loop in wall time and in CPU time (of this
// OS thread for single-threaded runs, of the process otherwise).
type clock struct {
	self     bool
	cpu0     time.Duration
	haveCPU  bool
	threaded bool
}

func startClock(threads int) *clock {
	c := &clock{self: threads > 1}
	if !c.self {
		runtime.LockOSThread()
	}
	c.cpu0, c.haveCPU = cpuTime(c.self)
	return c
}

// seconds returns the time per op to base rates on: CPU time when it is
// available (a loaded machine inflates wall time), else wall time; it also
// reports cpu-s/op and unlocks the thread.
func (c *clock) seconds(b *testing.B) float64 {
	wall := b.Elapsed().Seconds() / float64(b.N)
	cpu1, ok := cpuTime(c.self)
	if !c.self {
		runtime.UnlockOSThread()
	}
	if !ok || !c.haveCPU {
		return wall
	}
	sec := (cpu1 - c.cpu0).Seconds() / float64(b.N)
	b.ReportMetric(sec, "cpu-s/op")
	if c.self {
		return wall // several threads: CPU time is the sum over them
	}
	return sec
}

// benchPoints returns n generated points in d dimensions (10 blobs), cached
// across benchmarks.
func benchPoints(b *testing.B, n, d int) []float64 {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if p, ok := benchCache[[2]int{n, d}]; ok {
		return p
	}
	g := GenConfig{Seed: 42, N: n, D: d, Blobs: 10, Spread: 10, Sigma: 1}
	p := make([]float64, n*d)
	if err := Generate(g, 0, n, p); err != nil {
		b.Fatal(err)
	}
	benchCache[[2]int{n, d}] = p
	return p
}

// benchCentroids takes k spread-out points of the data as centroids.
func benchCentroids(pts []float64, n, d, k int) []float64 {
	c := make([]float64, k*d)
	for j := 0; j < k; j++ {
		i := int(int64(j) * int64(n) / int64(k))
		copy(c[j*d:], pts[i*d:i*d+d])
	}
	return c
}

func allImpls() []Impl {
	var out []Impl
	for _, i := range []Impl{ImplNaive, ImplGo, ImplAVX2, ImplAVX512} {
		if Available(i) {
			out = append(out, i)
		}
	}
	return out
}

// BenchmarkKernel measures one assignment pass (Kernel.Step, single thread)
// over 64Ki points as distance evaluations per second, the fraction of the
// FP64 peak (a distance in the expansion is d fused multiply-adds = 2d
// flops) and, for the fast kernels, the speed-up over the naive kernel
// measured in the same run. Rates are per second of this thread's CPU time
// where the OS reports it (cpu-s/op), so a busy machine does not distort
// them; ns/op stays wall time.
func BenchmarkKernel(b *testing.B) {
	const n = 1 << 16
	for _, d := range []int{10} {
		pts := benchPoints(b, n, d)
		for _, k := range []int{10, 100, 1000} {
			cent := benchCentroids(pts, n, d, k)
			for _, impl := range allImpls() {
				name := fmt.Sprintf("d=%d/k=%d/impl=%s", d, k, impl)
				b.Run(name, func(b *testing.B) {
					kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: 1})
					if err != nil {
						b.Fatal(err)
					}
					defer kr.Close()
					p := NewPartial(k, d)
					clk := startClock(1)
					for b.Loop() {
						if err := kr.Step(cent, p); err != nil {
							b.Fatal(err)
						}
					}
					rate := float64(n) * float64(k) / clk.seconds(b)
					gflops := rate * 2 * float64(d) / 1e9
					b.ReportMetric(rate, "dist/s")
					b.ReportMetric(gflops, "GFLOP/s")
					b.ReportMetric(100*gflops/peakGFLOPS, "%peak")
					key := fmt.Sprintf("d=%d/k=%d", d, k)
					naiveRateMu.Lock()
					defer naiveRateMu.Unlock()
					if impl == ImplNaive {
						naiveRate[key] = rate
					} else if nr := naiveRate[key]; nr > 0 {
						b.ReportMetric(rate/nr, "x_naive")
					}
				})
			}
		}
	}
}

// BenchmarkIteration measures one Lloyd assignment pass over the paper's
// data set size, 1M points in 10 dimensions (ns/op is the wall time per
// iteration; the centroid update itself is O(k*d) and negligible), with
// the pure-Go kernel and the best one, on 1 and 2 goroutines. s/iter is
// thread CPU time for 1 goroutine and wall time for 2.
func BenchmarkIteration(b *testing.B) {
	const n, d = 1_000_000, 10
	pts := benchPoints(b, n, d)
	impls := []Impl{ImplGo}
	if Best() != ImplGo {
		impls = append(impls, Best())
	}
	for _, k := range []int{10, 100, 1000} {
		cent := benchCentroids(pts, n, d, k)
		for _, impl := range impls {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("n=1M/d=%d/k=%d/impl=%s/threads=%d", d, k, impl, threads), func(b *testing.B) {
					kr, err := NewKernel(pts, d, k, Config{Impl: impl, Threads: threads})
					if err != nil {
						b.Fatal(err)
					}
					defer kr.Close()
					p := NewPartial(k, d)
					clk := startClock(threads)
					for b.Loop() {
						if err := kr.Step(cent, p); err != nil {
							b.Fatal(err)
						}
					}
					sec := clk.seconds(b)
					b.ReportMetric(sec, "s/iter")
					b.ReportMetric(float64(n)*float64(k)/sec, "dist/s")
				})
			}
		}
	}
}
