// Package kernel is the numeric core of the fault-tolerant K-means app
// (apps/kmeans): the assignment kernel (Kernel, with exact pruning), the
// centroid update, single-process Lloyd's algorithm and its plain
// Reference, the starting centroids (InitIndices, k-means++) and the
// synthetic data set (Generate), whose counter-based hash the seeding
// shares. It imports nothing of the project: the point files
// (apps/kmeans/points) and the distributed job (apps/kmeans) are built on
// top of it and wrap its sentinel errors (ErrConfig, ErrShape, ...).
//
// # Usage
//
// One rank, one shard of the global data set:
//
//	g := kernel.DefaultGenConfig()              // or points.ReadShard(path, lo, hi, points.CSVLayout{})
//	shard := make([]float64, (hi-lo)*g.D)
//	err := kernel.Generate(g, lo, hi, shard)
//	idx, err := kernel.InitIndices(seed, g.N, k) // or points.ReadCentroidsCSV(path, k, d)
//	// each rank: kernel.FillFromShard(cent, idx, shard, lo, d), then combine
//	kr, err := kernel.NewKernel(shard, g.D, k, kernel.DefaultConfig())
//	defer kr.Close()
//	p := kernel.NewPartial(k, g.D)
//	for it := 0; it < maxIter; it++ {
//		err = kr.Step(cent, p)                   // this shard's sums, counts, SSE, changes
//		// allreduce p.Sums, p.Counts, p.SSE, p.Changed over the ranks
//		shift, err := kernel.Update(cent, cent, p.Sums, p.Counts, k, g.D)
//		if shift <= tol { break }
//	}
//	fmt.Println(kernel.Checksum(cent))
//
// Single process: kernel.Lloyd(ctx, pts, d, init, kernel.LocalConfig()).
//
// # The kernel's arithmetic
//
// For point x and centroid c the blocked kernels evaluate
//
//	v(x, c) = ||c||² + Σ_t x_t·(−2c_t)
//
// (the point's own ||x||² is the same for every centroid and is left out of
// the comparison): ||c||² is a chain of fused multiply-adds over t in
// dimension order, and v starts from ||c||² and adds one fused multiply-add
// per dimension in dimension order. The pure-Go kernel (math.FMA) and the
// AVX2 and AVX-512 assembly perform exactly these operations, so they
// choose the same centroids bit for bit; tests require it. The nearest
// centroid is the smallest v, ties going to the lowest index.
//
// Near-ties: the expansion rounds differently from the direct distance
// Σ(x_t−c_t)², which the naive kernel (ImplNaive) and Reference use. When
// two centroids are at almost the same distance from a point (relative
// difference around 1e-16 times (||x||²+||c||²)/||x−c||²) the two methods
// may pick different ones. Both answers are equally good; tests compare
// the chosen distances with a tolerance, and demand identical assignments
// only on well-separated data. Data far from the origin relative to its
// spread makes the expansion less accurate; centre such data first.
// Coordinates so large that their squares overflow (|x| above about 1e154)
// are not supported.
//
// Sums, counts and SSE are then accumulated from the assigned points, by
// the same arithmetic in every implementation (Go, or AVX2 assembly for
// the assembly kernels): sums[a] += x elementwise in point order, and the
// SSE is the direct Σ(x_t−c_t)² (accurate and never negative, unlike a
// value derived from the expansion), summed as four interleaved partial
// sums over the first d&^3 dimensions, combined (p0+p2)+(p1+p3), then the
// remaining dimensions, with no fused operations. Because the point's own
// ||x||² is needed neither for the comparison nor for the SSE, no point
// norms are stored.
//
// # Determinism
//
// A shard is cut into fixed accumulation chunks, a function of the shard
// size, k and d only (at most 64 chunks of at least 8192 points, fewer when
// k·d is so large that 64 partials would exceed 32 MiB). Each chunk's sums
// start from zero and add its points in point order; the shard's result is
// the chunks' partials added in chunk order. Threads only decide which
// goroutine computes which chunk, so the result is bit-identical for any
// Config.Threads and any scheduling, on every run. Different shardings of a
// data set (different numbers of ranks) add in different orders and agree
// only to rounding; the distributed app must combine rank partials in a
// fixed order too.
//
// The distributed job (apps/kmeans) combines the partials of its logical
// shards (Options.Shards, or one per rank) in shard order, each shard with
// its own Kernel, so a job with Shards set gives the same bits on any
// number of ranks.
//
// Empty clusters keep their previous centroid (Update and Reference).
// Convergence is decided on the centroid shift only (not on Changed), so a
// rank restored from a checkpoint with a stale assignment memory still
// follows the failure-free run; Changed is informational.
//
// # Exact pruning
//
// Config.Algo AlgoHamerly and AlgoYinyang find the same nearest centroid
// as brute force (AlgoLloyd) for every point, so sums, counts, SSE and
// centroids are the same bits. Per point the kernel keeps u, an upper
// bound on the Euclidean distance to its centroid a, and l, a lower bound
// on the distance to every other centroid (AlgoYinyang: also one lower
// bound per group of centroids, float32 rounded down, moved by the
// group's summed drifts since the point's bounds were set). After the
// centroids move by δ_j, u grows by δ_a and l shrinks by the largest other
// drift; half the distance from a to its nearest other centroid is a
// second lower bound. The rounding margin: with u = 2^-53 and
// γ_n = nu/(1−nu), the computed v̂ = ||c||² − 2x·c (the FMA chain above)
// is within
//
//	E = 2γ_{2d+1}·(||x||² + R²),  R² ≥ max_j ||c_j||²
//
// of the exact value. A point keeps a when m² − u² > 2E, m the lower bound:
// then v̂_j > v̂_a strictly for every j ≠ a, whatever the rounding, so brute
// force picks a too. Every bound and test is rounded outwards by a relative
// (2d+16)·u plus 2^-1000 (for underflow). A point that fails the test
// first recomputes v̂_a (the same bits as the blocked kernels: one FMA chain
// per centroid) and tries again; then AlgoYinyang scans the groups its
// bounds do not rule out, and AlgoHamerly scans every centroid (on AVX-512
// with a variant of the kernel that keeps each lane's two smallest values;
// elsewhere in Go) and takes the smallest v̂, ties to the lowest index,
// exactly as brute force.
//
// AlgoYinyang's groups (about k/64 of them, formed once by a few rounds of
// Lloyd's algorithm on the first centroids) hold the points' bounds
// relative to a version stamp: the bound of a point and a group at version
// v is the stored one minus the group's drifts summed from the point's
// stamp to v (running sums, rounded up and down, kept for the last
// histLen versions), so a group that is ruled out is read, never written.
// The filter's test runs eight groups to an AVX-512 instruction; a batch
// of 2,048 points queues its (point, group) pairs and scans them group by
// group, the gathered points through the two-smallest kernel (yyfilter.go).
// A point's first bounds come from its full scan and the centroids'
// distances to each other: for group g, the larger of its distance to the
// second-nearest centroid and, by the triangle inequality, the distance
// from its centroid c_a to g's nearest other member less its distance to
// c_a; the groups near c_a are scanned by the next Step if it needs them.
// Each Step runs in stages over a batch (assign.go), each a loop whose
// iterations do not depend on each other and whose outcome is a list of
// points rather than a branch per point.
//
// The bounds are derived state and are not checkpointed: they refer to the
// Kernel's own copy of the centroids of its previous Step and to its own
// record of each point's centroid, so a Step with any centroids (restored
// from a checkpoint, say) is still exact, and a new Kernel (a promoted
// spare, a taken-over shard, a resumed job) starts with one full scan.
// Checkpointing them would add 16 bytes per point (8·G more for
// AlgoYinyang) to every checkpoint for a saving of one iteration's work
// per recovery. PruneStats counts the points skipped, settled after one
// distance, settled by their groups and fully scanned.
//
// # Seeding
//
// SeedPlusPlus is k-means++ without sums over the points: draw c takes the
// point with the smallest key −ln(u)/w (w its squared distance to the
// nearest chosen centroid, u hashed from seed, c and the point's index),
// the lowest index among equal keys; that is point i with probability
// w_i/Σw. The minimum does not depend on the order points are visited in,
// so InitPlusPlus and a job on any number of ranks and shards (which
// scans its shards with PlusPlusDraw) choose the same centroids.
//
// # Checksum
//
// Checksum is the hex SHA-256 of the centroids' float64 bits,
// little-endian, in order: two runs produced the same centroids bit for
// bit iff their checksums are equal.
//
// # Concurrency and ownership
//
// A Kernel is used by one goroutine at a time. It keeps (does not copy)
// the points slice, which must not change while the Kernel lives. It owns
// Threads−1 worker goroutines, started by NewKernel and stopped by Close
// (idempotent). Step allocates nothing (except AlgoYinyang's first Step,
// which forms the groups from the centroids); the slice from Assignments
// is owned by the Kernel (or is the caller's buffer, given to
// UseAssignments) and valid until the next Step. All other functions are
// safe for concurrent use on distinct arguments.
//
// # Assembly
//
// On amd64 the AVX-512F and AVX2+FMA kernels are chosen at run time
// (golang.org/x/sys/cpu); the build tag purego removes them, and every
// build keeps the pure-Go kernel. ImplAuto picks the fastest available.
package kernel
