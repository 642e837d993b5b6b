package kernel

import (
	"context"
	"math"
)

// Result is the outcome of Lloyd or Reference.
type Result struct {
	// Centroids are the final k*d centroids, row-major.
	Centroids []float64
	// Iterations is the number of assignment+update rounds run.
	Iterations int
	// Converged says the last update moved no centroid farther than Tol
	// (otherwise MaxIter stopped the run).
	Converged bool
	// Shift is the largest centroid move of the last update.
	Shift float64
	// SSE is the sum of squared distances of the points to their assigned
	// centroids in the last assignment pass (that is, to the centroids
	// before the last update).
	SSE float64
	// Counts is the number of points per cluster in the last assignment.
	Counts []int64
	// Assign is the cluster of every point in the last assignment.
	Assign []int32
}

// Reference is the plain single-process Lloyd's algorithm used to check
// everything else: direct distances, ties to the lowest index, sums in
// point order, an empty cluster keeps its previous centroid, and the loop
// stops after maxIter rounds or when no centroid moved farther than tol.
// It has no cleverness on purpose.
func Reference(points []float64, d int, init []float64, maxIter int, tol float64) (*Result, error) {
	if d < 1 || len(points)%d != 0 || len(points) == 0 {
		return nil, shapeErr("Reference: len(points) = %d is not a positive multiple of d = %d", len(points), d)
	}
	if len(init)%d != 0 || len(init) == 0 {
		return nil, shapeErr("Reference: len(init) = %d is not a positive multiple of d = %d", len(init), d)
	}
	if maxIter < 1 || !(tol >= 0) {
		return nil, configErr("Reference: maxIter = %d, tol = %v; want maxIter ≥ 1 and tol ≥ 0", maxIter, tol)
	}
	n, k := len(points)/d, len(init)/d
	cent := append([]float64(nil), init...)
	res := &Result{Assign: make([]int32, n), Counts: make([]int64, k)}
	sums := make([]float64, k*d)
	for it := 1; it <= maxIter; it++ {
		clear(sums)
		clear(res.Counts)
		sse := 0.0
		for i := 0; i < n; i++ {
			x := points[i*d : i*d+d]
			best, bestDist := 0, math.Inf(1)
			for j := 0; j < k; j++ {
				dist := 0.0
				for t := 0; t < d; t++ {
					diff := x[t] - cent[j*d+t]
					dist += diff * diff
				}
				if dist < bestDist {
					best, bestDist = j, dist
				}
			}
			res.Assign[i] = int32(best)
			res.Counts[best]++
			for t := 0; t < d; t++ {
				sums[best*d+t] += x[t]
			}
			sse += bestDist
		}
		shift := 0.0
		for j := 0; j < k; j++ {
			if res.Counts[j] == 0 {
				continue // empty cluster: keep the previous centroid
			}
			move := 0.0
			for t := 0; t < d; t++ {
				nv := sums[j*d+t] / float64(res.Counts[j])
				diff := nv - cent[j*d+t]
				move += diff * diff
				cent[j*d+t] = nv
			}
			shift = math.Max(shift, math.Sqrt(move))
		}
		res.Iterations, res.SSE, res.Shift = it, sse, shift
		if shift <= tol {
			res.Converged = true
			break
		}
	}
	res.Centroids = cent
	return res, nil
}

// Lloyd runs Lloyd's algorithm on one process with the fast Kernel
// (cfg.Impl, cfg.Threads) from the given initial centroids, stopping after
// cfg.MaxIter rounds or once no centroid moved farther than cfg.Tol. Empty
// clusters keep their previous centroid (Update). The result is
// bit-identical for every Threads value and for ImplGo/ImplAVX2/ImplAVX512.
// ctx is checked between iterations.
func Lloyd(ctx context.Context, points []float64, d int, init []float64, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d < 1 || len(init)%d != 0 || len(init) == 0 {
		return nil, shapeErr("Lloyd: len(init) = %d is not a positive multiple of d = %d", len(init), d)
	}
	if len(points) == 0 {
		return nil, shapeErr("Lloyd: no points")
	}
	k := len(init) / d
	kr, err := NewKernel(points, d, k, cfg)
	if err != nil {
		return nil, err
	}
	defer kr.Close()
	cent := append([]float64(nil), init...)
	next := make([]float64, len(cent))
	p := NewPartial(k, d)
	res := &Result{}
	for it := 1; it <= cfg.MaxIter; it++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := kr.Step(cent, p); err != nil {
			return nil, err
		}
		shift, err := Update(next, cent, p.Sums, p.Counts, k, d)
		if err != nil {
			return nil, err
		}
		cent, next = next, cent
		res.Iterations, res.SSE, res.Shift = it, p.SSE, shift
		if shift <= cfg.Tol {
			res.Converged = true
			break
		}
	}
	res.Centroids = cent
	res.Counts = append([]int64(nil), p.Counts...)
	res.Assign = append([]int32(nil), kr.Assignments()...)
	return res, nil
}
