package kernel

import (
	"fmt"
	"math"
	"runtime"
	"strings"
)

// Impl selects the inner loop a Kernel uses to find nearest centroids.
//
// ImplGo, ImplAVX2 and ImplAVX512 evaluate the same arithmetic in the same
// order (||c||² followed by one fused multiply-add per dimension, see doc.go),
// so they produce bit-identical assignments, sums and SSE; ImplNaive uses
// direct distances and can differ from them at near-ties.
type Impl int

const (
	// ImplAuto picks the fastest implementation this CPU supports.
	ImplAuto Impl = iota
	// ImplNaive computes Σ(x-c)² directly. It is the reference: slow and
	// obviously correct.
	ImplNaive
	// ImplGo is the blocked pure-Go norm-expansion kernel. It is always
	// available.
	ImplGo
	// ImplAVX2 is amd64 assembly using AVX2 and FMA (4 lanes).
	ImplAVX2
	// ImplAVX512 is amd64 assembly using AVX-512F (8 lanes).
	ImplAVX512
)

var implNames = [...]string{"auto", "naive", "go", "avx2", "avx512"}

func (i Impl) String() string { return enumName(implNames[:], int(i), "Impl") }

// ParseImpl parses the names printed by Impl.String ("auto", "naive", "go",
// "avx2", "avx512").
func ParseImpl(s string) (Impl, error) {
	i, err := parseEnum(implNames[:], s, "kernel")
	return Impl(i), err
}

// enumName is the name of value i of a named enumeration (Impl, Algo,
// Seeding), or typ(i) for a value without one.
func enumName(names []string, i int, typ string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", typ, i)
}

// parseEnum finds s among names, ignoring case; the error (ErrConfig)
// lists them.
func parseEnum(names []string, s, what string) (int, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i, nil
		}
	}
	return 0, configErr("unknown %s %q: use one of %s", what, s, strings.Join(names, ", "))
}

// Available reports whether impl can run on this machine and build.
// ImplAuto, ImplNaive and ImplGo are always available; the assembly kernels
// need amd64, the CPU feature at run time, and a build without the purego tag.
func Available(impl Impl) bool {
	switch impl {
	case ImplAuto, ImplNaive, ImplGo:
		return true
	case ImplAVX2:
		return hasAVX2
	case ImplAVX512:
		return hasAVX512
	}
	return false
}

// Best returns the implementation ImplAuto resolves to on this machine.
func Best() Impl {
	switch {
	case hasAVX512:
		return ImplAVX512
	case hasAVX2:
		return ImplAVX2
	}
	return ImplGo
}

func (i Impl) resolve() Impl {
	if i == ImplAuto {
		return Best()
	}
	return i
}

// MaxThreads bounds Config.Threads.
const MaxThreads = 1024

// Config tunes a Kernel and Lloyd.
type Config struct {
	// Impl picks the distance kernel. ImplAuto uses the fastest one this CPU
	// supports; set ImplGo to rule out assembly, ImplNaive for the reference.
	Impl Impl
	// Algo picks how nearest centroids are found: AlgoLloyd (brute force),
	// an exact pruned algorithm, or AlgoAuto; all give the same bits
	// (doc.go).
	Algo Algo
	// BoundsMemory bounds the bytes a Kernel's pruning bounds may take
	// (BoundsBytes); a pruned Algo whose bounds would not fit falls back to
	// a cheaper one (AlgoYinyang to AlgoHamerly to AlgoLloyd: the same
	// bits), Kernel.Algo says which. 0: no bound.
	BoundsMemory int64
	// Threads is how many goroutines a Kernel splits its shard over
	// (1..MaxThreads). Results are bit-identical for every value, so this
	// is purely a speed knob. 1 runs everything on the caller's goroutine; a
	// rank process normally uses 1 and lets the ranks provide parallelism.
	Threads int
	// MaxIter is the most Lloyd iterations (assignment + update) run, ≥ 1.
	MaxIter int
	// Tol stops Lloyd once no centroid moved farther than Tol (Euclidean
	// distance, in the units of the data) in an update. 0 means "stop only
	// when the centroids no longer change at all".
	Tol float64
}

// DefaultConfig is for real runs: fastest kernel, one thread (a rank process
// gets its parallelism from the other ranks), up to 100 iterations.
func DefaultConfig() Config {
	return Config{Impl: ImplAuto, Threads: 1, MaxIter: 100, Tol: 1e-9}
}

// LocalConfig is for single-process baselines and tests on this machine:
// as DefaultConfig, but one goroutine per CPU (at most 2; the reference
// box has 2 cores) and a smaller iteration budget.
func LocalConfig() Config {
	c := DefaultConfig()
	c.Threads = min(2, runtime.NumCPU())
	c.MaxIter = 50
	return c
}

// Validate checks the fields and their relations; it never changes c.
func (c Config) Validate() error {
	if err := c.validateKernel(); err != nil {
		return err
	}
	if c.MaxIter < 1 {
		return configErr("MaxIter = %d, want ≥ 1", c.MaxIter)
	}
	if c.Tol < 0 || math.IsNaN(c.Tol) || math.IsInf(c.Tol, 0) {
		return configErr("Tol = %v, want a finite value ≥ 0", c.Tol)
	}
	return nil
}

// validateKernel checks the fields a Kernel uses (Impl, Threads).
func (c Config) validateKernel() error {
	if c.Impl < ImplAuto || c.Impl > ImplAVX512 {
		return configErr("Impl = %d is not a known kernel", int(c.Impl))
	}
	if !Available(c.Impl) {
		return configErr("Impl = %s is not available on this CPU/build; use %s (or auto)", c.Impl, Best())
	}
	if c.BoundsMemory < 0 {
		return configErr("BoundsMemory = %d, want 0 (no bound) or a number of bytes", c.BoundsMemory)
	}
	if c.Algo < AlgoLloyd || c.Algo > AlgoAuto {
		return configErr("Algo = %d is not a known algorithm", int(c.Algo))
	}
	if (c.Algo == AlgoHamerly || c.Algo == AlgoYinyang) && c.Impl == ImplNaive {
		return configErr("Algo = %s needs a norm-expansion kernel (go, avx2, avx512 or auto), not %s", c.Algo, c.Impl)
	}
	if c.Threads < 1 || c.Threads > MaxThreads {
		return configErr("Threads = %d, want 1..%d", c.Threads, MaxThreads)
	}
	return nil
}
