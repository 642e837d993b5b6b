package kernel

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

func genData(t *testing.T, g GenConfig) []float64 {
	t.Helper()
	p := make([]float64, g.N*g.D)
	if err := Generate(g, 0, g.N, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLloydMatchesReference: same data, same init; the fast Lloyd and the
// plain Reference run the same number of iterations to the same
// assignments and centroids equal to rounding.
func TestLloydMatchesReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		g GenConfig
		k int
	}{
		{GenConfig{Seed: 1, N: 4000, D: 2, Blobs: 5, Spread: 20, Sigma: 1}, 5},
		{GenConfig{Seed: 2, N: 6000, D: 10, Blobs: 10, Spread: 10, Sigma: 1}, 10},
		{GenConfig{Seed: 3, N: 3000, D: 5, Blobs: 8, Spread: 10, Sigma: 1}, 20},
	} {
		pts := genData(t, tc.g)
		init, err := InitCentroids(pts, tc.g.D, tc.k, 5)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := Reference(pts, tc.g.D, init, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !ref.Converged {
			t.Fatalf("reference did not converge in 100 iterations")
		}
		for _, impl := range fastImpls() {
			cfg := Config{Impl: impl, Threads: 2, MaxIter: 100, Tol: 0}
			got, err := Lloyd(context.Background(), pts, tc.g.D, init, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got.Iterations != ref.Iterations || !got.Converged {
				t.Fatalf("%v: %d iterations (converged %v), reference %d", impl, got.Iterations, got.Converged, ref.Iterations)
			}
			for i := range ref.Assign {
				if got.Assign[i] != ref.Assign[i] {
					t.Fatalf("%v: point %d in cluster %d, reference %d", impl, i, got.Assign[i], ref.Assign[i])
				}
			}
			for i := range ref.Centroids {
				if math.Abs(got.Centroids[i]-ref.Centroids[i]) > 1e-12*(1+math.Abs(ref.Centroids[i])) {
					t.Fatalf("%v: centroid value %d = %v, reference %v", impl, i, got.Centroids[i], ref.Centroids[i])
				}
			}
			if math.Abs(got.SSE-ref.SSE) > 1e-9*ref.SSE {
				t.Fatalf("%v: SSE %v, reference %v", impl, got.SSE, ref.SSE)
			}
		}
	}
}

// TestLloydBitIdentical: the result is the same bits for every thread
// count and every fast kernel.
func TestLloydBitIdentical(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 8, N: 20000, D: 8, Blobs: 10, Spread: 3, Sigma: 1} // overlapping blobs, 3 chunks
	pts := genData(t, g)
	init, _ := InitCentroids(pts, g.D, 16, 1)
	var want string
	for _, impl := range fastImpls() {
		for _, threads := range []int{1, 2, 5} {
			res, err := Lloyd(context.Background(), pts, g.D, init, Config{Impl: impl, Threads: threads, MaxIter: 8})
			if err != nil {
				t.Fatal(err)
			}
			sum := Checksum(append(res.Centroids, res.SSE))
			if want == "" {
				want = sum
			} else if sum != want {
				t.Fatalf("%v threads=%d: checksum %s, want %s", impl, threads, sum, want)
			}
		}
	}
}

func TestLloydEmptyClusterKeepsCentroid(t *testing.T) {
	t.Parallel()
	g := GenConfig{Seed: 6, N: 1000, D: 3, Blobs: 3, Spread: 5, Sigma: 1}
	pts := genData(t, g)
	init, _ := InitCentroids(pts, g.D, 3, 2)
	far := []float64{1e6, -1e6, 1e6}
	init = append(init, far...) // cluster 3 never gets a point
	ref, err := Reference(pts, g.D, init, 50, 1e-12)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Lloyd(context.Background(), pts, g.D, init, Config{Threads: 1, MaxIter: 50, Tol: 1e-12})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Result{ref, got} {
		if r.Counts[3] != 0 || kmtest.SameBits(r.Centroids[9:12], far) != -1 {
			t.Fatalf("empty cluster: count %d, centroid %v, want 0 and %v", r.Counts[3], r.Centroids[9:12], far)
		}
	}
}

func TestLloydErrorsAndCancel(t *testing.T) {
	t.Parallel()
	pts := kmtest.RandPoints(1, 100, 2)
	init := pts[:6]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Lloyd(ctx, pts, 2, init, LocalConfig()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := Lloyd(context.Background(), pts, 2, init, Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("zero config: %v", err)
	}
	if _, err := Lloyd(context.Background(), pts, 2, init[:5], LocalConfig()); !errors.Is(err, ErrShape) {
		t.Errorf("ragged init: %v", err)
	}
	if _, err := Reference(pts, 3, init, 10, 0); !errors.Is(err, ErrShape) {
		t.Errorf("reference ragged points: %v", err)
	}
	if _, err := Reference(pts, 2, init, 0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("reference maxIter 0: %v", err)
	}
	res, err := Lloyd(context.Background(), pts, 2, init, Config{Threads: 1, MaxIter: 1})
	if err != nil || res.Iterations != 1 {
		t.Errorf("MaxIter 1: %+v, %v", res, err)
	}
}
