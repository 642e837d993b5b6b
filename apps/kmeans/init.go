package kmeans

import (
	"context"
	"math"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
	"github.com/gaspigo/gaspigo/pgas"
)

// initCentroids chooses the starting centroids: read from Options.Init,
// k-means++ (initPlusPlus), or the points kernel.InitIndices picks, each
// row generated or taken from the rank whose shard holds it.
func (j *Job) initCentroids(ctx context.Context) error {
	k, d := j.opt.K, j.d
	if j.opt.Init != "" {
		c, err := points.ReadCentroidsCSV(j.opt.Init, k, d)
		if err != nil {
			return err
		}
		copy(j.cent, c)
		return nil
	}
	if j.opt.Seeding == kernel.SeedPlusPlus {
		return j.initPlusPlus(ctx)
	}
	idx, err := kernel.InitIndices(j.opt.Seed, j.n, k)
	if err != nil {
		return err
	}
	if j.opt.Input == "" {
		// Generated data: any rank can make any point.
		for c, i := range idx {
			if err := kernel.Generate(j.opt.Gen, i, i+1, j.cent[c*d:(c+1)*d]); err != nil {
				return err
			}
		}
		return nil
	}
	// From a file: each row comes from the rank that owns it. Rows travel
	// with an ownership flag and are taken, never added, so the bits
	// (a -0 included) are exactly the file's.
	rows := make([]float64, k*(d+1))
	for c, i := range idx {
		for _, sh := range j.mine {
			if i >= sh.lo && i < sh.hi {
				rows[c*(d+1)] = 1
				copy(rows[c*(d+1)+1:], sh.pts[(i-sh.lo)*d:(i-sh.lo+1)*d])
			}
		}
	}
	err = pgas.AllreduceFunc(ctx, j.rt, nil, rows, func(dst, src []float64) {
		for c := 0; c < k; c++ {
			if src[c*(d+1)] == 1 {
				copy(dst[c*(d+1):(c+1)*(d+1)], src[c*(d+1):(c+1)*(d+1)])
			}
		}
	})
	if err != nil {
		return err
	}
	for c := 0; c < k; c++ {
		copy(j.cent[c*d:(c+1)*d], rows[c*(d+1)+1:(c+1)*(d+1)])
	}
	return nil
}

// initPlusPlus is kernel.InitPlusPlus over the job's shards: every rank
// scans its own, the ranks agree on the smallest key with one allreduce
// per centroid, and the chosen point's row comes from the generator or
// from the rank holding it.
func (j *Job) initPlusPlus(ctx context.Context) error {
	k, d := j.opt.K, j.d
	ws := make([][]float64, len(j.mine))
	for s, sh := range j.mine {
		ws[s] = make([]float64, sh.hi-sh.lo)
		for i := range ws[s] {
			ws[s][i] = math.Inf(1)
		}
	}
	first := kernel.PlusPlusFirst(j.opt.Seed, j.n)
	if err := j.fetchRow(ctx, first, j.cent[:d]); err != nil {
		return err
	}
	v := make([]float64, 2)
	for c := 1; c < k; c++ {
		b := kernel.NewPlusPlusDraw(j.opt.Seed, c)
		for s, sh := range j.mine {
			b.Scan(sh.pts, d, sh.lo, ws[s], j.cent[(c-1)*d:c*d])
		}
		v[0], v[1] = b.Key, float64(b.Index)
		err := pgas.AllreduceFunc(ctx, j.rt, nil, v, func(dst, src []float64) {
			if src[0] < dst[0] || (src[0] == dst[0] && src[1] >= 0 && (dst[1] < 0 || src[1] < dst[1])) {
				dst[0], dst[1] = src[0], src[1]
			}
		})
		if err != nil {
			return err
		}
		pick := first
		if v[1] >= 0 {
			pick = int(v[1])
		}
		if err := j.fetchRow(ctx, pick, j.cent[c*d:(c+1)*d]); err != nil {
			return err
		}
	}
	return nil
}

// fetchRow copies point i into dst on every rank: generated data is made
// locally, a file's row travels from the rank holding it (taken, not
// added, so the bits are the file's).
func (j *Job) fetchRow(ctx context.Context, i int, dst []float64) error {
	d := j.d
	if j.opt.Input == "" {
		return kernel.Generate(j.opt.Gen, i, i+1, dst)
	}
	row := make([]float64, d+1)
	for _, sh := range j.mine {
		if i >= sh.lo && i < sh.hi {
			row[0] = 1
			copy(row[1:], sh.pts[(i-sh.lo)*d:(i-sh.lo+1)*d])
		}
	}
	err := pgas.AllreduceFunc(ctx, j.rt, nil, row, func(dst, src []float64) {
		if src[0] == 1 {
			copy(dst, src)
		}
	})
	if err != nil {
		return err
	}
	copy(dst, row[1:])
	return nil
}
