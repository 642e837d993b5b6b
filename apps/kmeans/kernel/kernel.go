package kernel

import (
	"math"
	"sync"
)

// Tuning constants of the blocked kernels. They only affect speed, never
// results: every Impl except ImplNaive gives the same bits for any of them.
const (
	// lanes is the packing width of the centroid layout (one AVX-512
	// register of float64).
	lanes = 8
	// l1Budget is the number of bytes of L1 data cache a centroid chunk may
	// use; the rest holds the point block and the per-point state.
	l1Budget = 16 << 10
	// maxChunks bounds the number of fixed accumulation chunks per shard
	// (and with it the memory for per-chunk partial sums).
	maxChunks = 64
	// minChunkPoints is the smallest accumulation chunk worth having.
	minChunkPoints = 8192
	// partialBudget bounds the float64 values held by all per-chunk
	// partials together (32 MiB), so huge k*d gets fewer chunks.
	partialBudget = 4 << 20
)

// Kernel runs the assignment step of Lloyd's algorithm over one shard of
// points: for every point it finds the nearest of k centroids and
// accumulates per-cluster sums and counts, the SSE and the number of points
// that changed cluster since the previous Step. See doc.go for the
// arithmetic, the determinism guarantees and the ownership rules.
//
// A Kernel is not safe for concurrent use; it owns Threads-1 worker
// goroutines, stopped by Close.
type Kernel struct {
	n, d, k int
	impl    Impl
	asmAcc  bool      // accumulate with accumulateAVX2
	points  []float64 // n*d, owned by the caller, read-only
	assign  []int32   // n; -1 before the first Step

	kpad  int       // k rounded up to a multiple of lanes
	cpack []float64 // kpad*d: block b, dim t, lane l at (b*d+t)*lanes+l, holding -2*c
	cnorm []float64 // kpad: ||c||², +Inf for padding
	cent  []float64 // k*d copy of the centroids of the current Step

	chunkLo []int     // len nchunks+1; chunk c covers points [chunkLo[c], chunkLo[c+1])
	parts   []Partial // one per chunk

	blockPts    int // points per cache block
	batchPts    int // points per assignment batch: blockPts, more for AlgoYinyang (yyBatch)
	chunkBlocks int // centroid blocks (of lanes) per cache chunk

	pr *pruner // AlgoHamerly's bounds; nil for AlgoLloyd

	workers []*worker
	start   []chan struct{} // one per extra worker goroutine
	step    sync.WaitGroup  // completion of one Step's extra workers
	life    sync.WaitGroup  // lifetime of the worker goroutines
	closed  bool
}

type worker struct {
	id    int
	state []float64 // (blockPts+4) * 3*lanes: per point, lanes minima, lanes indices (and for top2, lanes second minima)
	best  []int32   // batchPts+4
	stats PruneStats
	// Full scans of the pruned algorithm (top2): the gathered points (with
	// room to pad a point group), their indices, and per point the winner,
	// its sub-group, its value and the smallest other value.
	gbuf []float64
	fidx []int32
	// The pruned stages' list of points (assign.go), with each one's
	// value for its own centroid and its error bound.
	vidx        []int32
	va, ev, thr []float64
	tbest       []int32
	tsub        []int32
	v1, v2      []float64
	t3          []float64 // lanesTop2's v1, at, v2 per point
	// AlgoYinyang: the group filter's batch (yyfilter.go).
	yy *yyWork
}

// NewKernel prepares a Kernel over points (n*d float64, row-major) for k
// centroids. points is kept, not copied: the caller must not modify it while
// the Kernel is in use. Every coordinate must be finite. Only cfg.Impl,
// cfg.Algo, cfg.BoundsMemory and cfg.Threads are used (Threads 0 is taken
// as 1, so Config{} works).
func NewKernel(points []float64, d, k int, cfg Config) (*Kernel, error) {
	if cfg.Threads == 0 {
		cfg.Threads = 1
	}
	if err := cfg.validateKernel(); err != nil {
		return nil, err
	}
	n, err := checkPoints(points, d, k)
	if err != nil {
		return nil, err
	}
	kr := &Kernel{
		n: n, d: d, k: k,
		impl:   cfg.Impl.resolve(),
		points: points,
		asmAcc: hasAVX2,
		assign: make([]int32, n),
	}
	for i := range kr.assign {
		kr.assign[i] = -1
	}
	if kr.impl != ImplAVX2 && kr.impl != ImplAVX512 {
		kr.asmAcc = false
	}
	kr.kpad = (k + lanes - 1) / lanes * lanes
	kr.cpack = make([]float64, kr.kpad*d)
	kr.cnorm = make([]float64, kr.kpad)
	kr.cent = make([]float64, k*d)
	kr.makeChunks()

	kr.blockPts = max(4, min(1024, l1Budget/(8*(2*lanes+d)))&^3)
	kr.chunkBlocks = max(2, l1Budget/(8*d*lanes)&^1)
	algo := fitAlgo(ChooseAlgo(cfg.Algo, k, d), n, k, cfg.BoundsMemory)
	if kr.impl == ImplNaive {
		algo = AlgoLloyd // AlgoAuto: the naive kernel has no norm expansion to prune
	}
	kr.batchPts = kr.blockPts
	if algo == AlgoYinyang {
		kr.batchPts = (yyBatch + kr.blockPts - 1) / kr.blockPts * kr.blockPts // whole blocks (accumulate)
	}
	if algo != AlgoLloyd {
		kr.pr = newPruner(points, n, d, k, algo == AlgoYinyang)
	}
	kr.startWorkers(min(cfg.Threads, len(kr.parts)), algo != AlgoLloyd)
	return kr, nil
}

// checkPoints checks the shape of a shard of points and that every
// coordinate is finite, and returns the number of points.
func checkPoints(points []float64, d, k int) (n int, err error) {
	if d < 1 || k < 1 {
		return 0, shapeErr("NewKernel: d = %d and k = %d, both must be ≥ 1", d, k)
	}
	if len(points)%d != 0 {
		return 0, shapeErr("NewKernel: len(points) = %d is not a multiple of d = %d", len(points), d)
	}
	n = len(points) / d
	if n > math.MaxInt32 {
		return 0, shapeErr("NewKernel: %d points in one shard; at most %d are supported", n, math.MaxInt32)
	}
	if k > 1<<24 {
		return 0, shapeErr("NewKernel: k = %d; at most %d clusters are supported", k, 1<<24)
	}
	for i, v := range points {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, shapeErrNotFinite(i/d, i%d, v)
		}
	}
	return n, nil
}

// makeChunks cuts the shard into its fixed accumulation chunks, a
// function of n, k and d only, so that the combine order (and hence every
// bit of the result) does not depend on Threads, and gives each a Partial.
func (kr *Kernel) makeChunks() {
	n, k, d := kr.n, kr.k, kr.d
	nch := max(1, min(maxChunks, (n+minChunkPoints-1)/minChunkPoints, partialBudget/(k*d+k)))
	kr.chunkLo = make([]int, nch+1)
	for c := 0; c <= nch; c++ {
		kr.chunkLo[c] = int(int64(n) * int64(c) / int64(nch))
	}
	kr.parts = make([]Partial, nch)
	for c := range kr.parts {
		kr.parts[c] = *NewPartial(k, d)
	}
}

// startWorkers makes the state of threads workers (with the buffers of the
// full scans when pruned) and starts the goroutines of all but the first,
// which is the caller's.
func (kr *Kernel) startWorkers(threads int, pruned bool) {
	d := kr.d
	kr.workers = make([]*worker, threads)
	for w := range kr.workers {
		kr.workers[w] = &worker{
			id:    w,
			state: make([]float64, (kr.blockPts+4)*3*lanes),
			best:  make([]int32, kr.batchPts+4),
		}
		if pruned {
			wk := kr.workers[w]
			wk.gbuf = make([]float64, (kr.blockPts+4)*d)
			wk.fidx = make([]int32, kr.batchPts)
			wk.vidx = make([]int32, kr.batchPts)
			wk.va = make([]float64, kr.batchPts)
			wk.ev = make([]float64, kr.batchPts)
			wk.tbest = make([]int32, kr.blockPts)
			wk.tsub = make([]int32, kr.blockPts)
			wk.v1 = make([]float64, kr.blockPts)
			wk.v2 = make([]float64, kr.blockPts)
			wk.t3 = make([]float64, (kr.blockPts+4)*3)
		}
	}
	kr.start = make([]chan struct{}, threads-1)
	for i := range kr.start {
		ch := make(chan struct{})
		kr.start[i] = ch
		w := kr.workers[i+1]
		kr.life.Add(1)
		go func() {
			defer kr.life.Done()
			for range ch {
				kr.runWorker(w)
				kr.step.Done()
			}
		}()
	}
}

func shapeErrNotFinite(point, dim int, v float64) error {
	return shapeErr("point %d dimension %d is %v: %w", point, dim, v, ErrNotFinite)
}

// N is the number of points in the shard.
func (kr *Kernel) N() int { return kr.n }

// D is the dimension.
func (kr *Kernel) D() int { return kr.d }

// K is the number of centroids.
func (kr *Kernel) K() int { return kr.k }

// Impl is the implementation in use (never ImplAuto).
func (kr *Kernel) Impl() Impl { return kr.impl }

// Threads is the number of goroutines a Step uses, including the caller's:
// Config.Threads, but never more than the shard's accumulation chunks
// (small shards, or a huge k*d, use fewer goroutines).
func (kr *Kernel) Threads() int { return len(kr.workers) }

// Assignments returns the cluster of every point after the last Step (-1
// before the first). The slice is owned by the Kernel and valid until the
// next Step; copy it to keep it.
func (kr *Kernel) Assignments() []int32 { return kr.assign }

// SetAssignments replaces the remembered assignment (e.g. after restoring a
// checkpoint), which only affects Partial.Changed of the next Step. Every
// value must be -1 or in [0, k).
func (kr *Kernel) SetAssignments(a []int32) error {
	if len(a) != kr.n {
		return shapeErr("SetAssignments: len = %d, the shard has %d points", len(a), kr.n)
	}
	for i, v := range a {
		if v < -1 || int(v) >= kr.k {
			return shapeErr("SetAssignments: point %d assigned to %d, want -1..%d", i, v, kr.k-1)
		}
	}
	copy(kr.assign, a)
	return nil
}

// UseAssignments makes buf (one value per point) the Kernel's memory of
// every point's cluster, after copying the current one into it, so that
// a caller can keep the memories of several Kernels in one buffer (one
// checkpoint region). Assignments returns buf from then on. Between Steps
// the caller may overwrite buf (restoring a checkpoint) with values -1..k-1;
// as with SetAssignments, that only affects Partial.Changed.
func (kr *Kernel) UseAssignments(buf []int32) error {
	if len(buf) != kr.n {
		return shapeErr("UseAssignments: len = %d, the shard has %d points", len(buf), kr.n)
	}
	copy(buf, kr.assign)
	kr.assign = buf
	return nil
}

// Close stops the worker goroutines. It is idempotent; Step fails with
// ErrClosed afterwards.
func (kr *Kernel) Close() error {
	if kr.closed {
		return nil
	}
	kr.closed = true
	for _, ch := range kr.start {
		close(ch)
	}
	kr.life.Wait()
	return nil
}

// Step runs one assignment pass with the given centroids (k*d, row-major,
// finite) and writes the shard's contribution into out (which must have been
// made by NewPartial(k, d); it is overwritten, not added to). It allocates
// nothing, but for AlgoYinyang's first Step (the groups). With a pruned
// Algo the result is the same bits as AlgoLloyd's, whatever centroids the
// previous Steps had.
func (kr *Kernel) Step(centroids []float64, out *Partial) error {
	if kr.closed {
		return ErrClosed
	}
	if len(centroids) != kr.k*kr.d {
		return shapeErr("Step: len(centroids) = %d, want k*d = %d*%d", len(centroids), kr.k, kr.d)
	}
	if !out.shapeOK(kr.k, kr.d) {
		return shapeErr("Step: out must be NewPartial(%d, %d)", kr.k, kr.d)
	}
	for i, v := range centroids {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return shapeErr("Step: centroid %d dimension %d is %v: %w", i/kr.d, i%kr.d, v, ErrNotFinite)
		}
	}
	if kr.pr != nil {
		kr.prepare(centroids)
	}
	kr.setCentroids(centroids)
	if kr.pr != nil {
		kr.prepareCentroids(kr.workers[0])
	}
	for _, w := range kr.workers {
		w.stats = PruneStats{}
	}

	kr.step.Add(len(kr.start))
	for _, ch := range kr.start {
		ch <- struct{}{}
	}
	kr.runWorker(kr.workers[0])
	kr.step.Wait()
	if kr.pr != nil {
		kr.pr.have = true
	}

	// Fixed-order combine: chunk 0, 1, 2, ... whatever ran them.
	out.Reset()
	for c := range kr.parts {
		_ = out.Add(&kr.parts[c])
	}
	return nil
}

// setCentroids packs the centroids for the blocked kernels: c is scaled by
// -2 (exact) and transposed into blocks of lanes centroids, and ||c||² is
// computed with fused multiply-adds in dimension order. Padding centroids get
// a norm of +Inf so they never win.
func (kr *Kernel) setCentroids(c []float64) {
	d := kr.d
	copy(kr.cent, c)
	for j := 0; j < kr.kpad; j++ {
		b, l := j/lanes, j%lanes
		if j >= kr.k {
			kr.cnorm[j] = math.Inf(1)
			for t := 0; t < d; t++ {
				kr.cpack[(b*d+t)*lanes+l] = 0
			}
			continue
		}
		row := c[j*d : j*d+d]
		var nrm float64
		for t, v := range row {
			nrm = math.FMA(v, v, nrm)
			kr.cpack[(b*d+t)*lanes+l] = -2 * v
		}
		kr.cnorm[j] = nrm
	}
}

// runWorker processes this worker's share of the chunks. Chunks are split
// over workers statically; each chunk's partial starts from zero.
func (kr *Kernel) runWorker(w *worker) {
	nch := len(kr.parts)
	t := len(kr.workers)
	for c := w.id * nch / t; c < (w.id+1)*nch/t; c++ {
		p := &kr.parts[c]
		p.Reset()
		for lo := kr.chunkLo[c]; lo < kr.chunkLo[c+1]; lo += kr.batchPts {
			hi := min(lo+kr.batchPts, kr.chunkLo[c+1])
			if kr.pr != nil {
				kr.assignPruned(w, lo, hi)
			} else {
				kr.argmin(w, lo, hi)
				w.stats.Scanned += int64(hi - lo)
				w.stats.Distances += int64(hi-lo) * int64(kr.k)
			}
			// Accumulated block by block whatever the batch: the SSE is a
			// sum of block sums, the same bits for every Algo.
			for b := lo; b < hi; b += kr.blockPts {
				kr.accumulate(w.best[b-lo:], b, min(b+kr.blockPts, hi), p)
			}
		}
	}
}

// argmin writes the nearest centroid of points [lo, hi) into w.best.
func (kr *Kernel) argmin(w *worker, lo, hi int) {
	d := kr.d
	x := kr.points[lo*d : hi*d]
	best := w.best[:hi-lo]
	switch kr.impl {
	case ImplNaive:
		argminNaive(x, d, kr.cent, kr.k, best)
	case ImplAVX512, ImplAVX2:
		done := kr.argminAsm(w, x, best)
		argminGo(x[done*d:], d, kr.k, kr.cpack, kr.cnorm, best[done:])
	default:
		argminGo(x, d, kr.k, kr.cpack, kr.cnorm, best)
	}
}

// Flags of the assembly kernels.
const (
	asmFirst = 1 // start from an empty per-point state
	asmLast  = 2 // reduce the state into best
)

// argminAsm runs the assembly kernel selected by kr.impl over as many
// leading points of x as it handles (a multiple of its point group),
// one L1-sized chunk of centroids at a time, and returns how many points
// that was.
func (kr *Kernel) argminAsm(w *worker, x []float64, best []int32) int {
	d := kr.d
	np := len(best)
	group, width := 4, lanes // AVX-512: 4 points, 8-lane state
	if kr.impl == ImplAVX2 {
		group, width = 2, 4 // AVX2: 2 points, 4-lane state
	}
	np -= np % group
	if np == 0 {
		return 0
	}
	st := w.state[:np*2*width]
	nb := kr.kpad / lanes
	for b0 := 0; b0 < nb; b0 += kr.chunkBlocks {
		cnt := min(kr.chunkBlocks, nb-b0)
		flags := 0
		if b0 == 0 {
			flags |= asmFirst
		}
		if b0+cnt == nb {
			flags |= asmLast
		}
		asmArgmin(kr.impl, x[:np*d], np, d, kr.cpack[b0*d*lanes:(b0+cnt)*d*lanes], cnt,
			kr.cnorm[b0*lanes:(b0+cnt)*lanes], float64(b0*lanes), st, best[:np], flags)
	}
	return np
}

// accumulate adds points [lo, hi) with their new assignment in best into
// p, in point order. The assembly kernels use accumulateAVX2, the others
// accumulateGo; both compute the same bits.
func (kr *Kernel) accumulate(best []int32, lo, hi int, p *Partial) {
	d := kr.d
	x := kr.points[lo*d : hi*d]
	best = best[:hi-lo]
	assign := kr.assign[lo:hi]
	var sse float64
	var changed int64
	if kr.asmAcc {
		sse, changed = asmAccumulate(x, d, best, assign, kr.cent, p.Sums, p.Counts, kr.k)
	} else {
		sse, changed = accumulateGo(x, d, best, assign, kr.cent, p.Sums, p.Counts)
	}
	// sse is this block's sum; adding block sums in block order is still a
	// fixed order for a given shard.
	p.SSE += sse
	p.Changed += changed
}
