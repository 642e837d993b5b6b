package kmeans

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
	"github.com/gaspigo/gaspigo/ckpt"
)

// shardsOptions: 12 logical shards of uneven size, no Shrink.
func shardsOptions() Options {
	opt := resumeOptions()
	opt.Shards = 12
	return opt
}

// memRun runs opt on ranks ranks in memory and returns rank 0's result
// after checking that every rank agrees.
func memRun(t *testing.T, opt Options, ranks int, h memHooks) (RunResult, string) {
	t.Helper()
	var res RunResult
	var out string
	h.ranks = ranks
	synctest.Test(t, func(t *testing.T) {
		got, errs, o := runMemJobWith(t, opt, nil, h)
		sameResult(t, fmt.Sprintf("%d ranks", ranks), got, errs, got[0], o)
		res, out = got[0], o
	})
	return res, out
}

// With logical shards the same job gives the same bits on 1, 2, 3 and 4
// ranks, brute force or pruned, and they are the shard-order sums that
// one process computes shard by shard (shardOrderLloyd).
func TestShardsAnyRanks(t *testing.T) {
	opt := shardsOptions()
	want := shardOrderLloyd(t, opt, opt.Shards)
	for _, algo := range []kernel.Algo{kernel.AlgoLloyd, kernel.AlgoHamerly, kernel.AlgoYinyang} {
		for _, ranks := range []int{1, 2, 3, 4} {
			o := opt
			o.Kernel.Algo = algo
			got, out := memRun(t, o, ranks, memHooks{})
			if i := kmtest.SameBits(got.Centroids, want); i >= 0 {
				t.Fatalf("%v on %d ranks: centroids differ from the shard-order sums at %d\n%s", algo, ranks, i, out)
			}
		}
	}
}

// A disk checkpoint taken on 4 ranks resumes on 3 (and on 2) and ends
// with the bits of a failure-free run; a different number of shards is
// refused.
func TestShardsResumeOnOtherRanks(t *testing.T) {
	opt := shardsOptions() // 15 iterations, checkpoints after 3, 6, 9, 12
	want, _ := memRun(t, opt, 3, memHooks{})
	dir := t.TempDir()
	diskRun(t, opt, dir)
	if err := os.RemoveAll(filepath.Join(dir, "ckpt-16")); err != nil { // the final one: resume mid-run
		t.Fatal(err)
	}
	resume := func(o Options, ranks int) ([]RunResult, []error, string, string) {
		return resumeOn(t, o, dir, ranks)
	}
	for _, ranks := range []int{3, 2} {
		got, errs, out, note := resume(opt, ranks)
		sameResult(t, fmt.Sprintf("resumed on %d ranks", ranks), got, errs, want, out)
		if !strings.Contains(note, "written by 4 ranks") || !strings.Contains(out, "iter   13") || strings.Contains(out, "iter   12") {
			t.Fatalf("resumed on %d ranks: note %q; want iterations 13.. only\n%s", ranks, note, out)
		}
	}
	// A damaged file of rank 0 in the newest checkpoint (the disk level
	// keeps no older one here): every rank refuses, naming the file.
	snap := filepath.Join(dir, "ckpt-13", "rank-0.snap")
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(snap, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, _, _ := resume(opt, 3)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank-0.snap") || !strings.Contains(err.Error(), "CRC32C") {
			t.Fatalf("rank %d: %v, want a refusal naming the damaged file", r, err)
		}
	}
	o := opt
	o.Shards = 6
	b[len(b)/2] ^= 0x40 // repaired
	if err := os.WriteFile(snap, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, _, _ = resume(o, 3)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "12 logical shards") {
			t.Fatalf("rank %d: %v, want a refusal naming 12 shards", r, err)
		}
	}
}

// Many more logical shards than a rank may checkpoint as regions of
// their own (ckpt.MaxRegions): 600 shards run on 1 and 2 ranks with the
// same bits, and a disk checkpoint of 4 ranks resumes on 1 and 3.
func TestManyShardsFewRanks(t *testing.T) {
	opt := resumeOptions()
	opt.Shards = 600
	want, _ := memRun(t, opt, 2, memHooks{})
	if got, out := memRun(t, opt, 1, memHooks{}); kmtest.SameBits(got.Centroids, want.Centroids) >= 0 {
		t.Fatalf("1 rank and 2 ranks differ\n%s", out)
	}
	dir := t.TempDir()
	diskRun(t, opt, dir) // 4 ranks: 150 shards each
	if err := os.RemoveAll(filepath.Join(dir, "ckpt-16")); err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{1, 3} {
		got, errs, out, _ := resumeOn(t, opt, dir, ranks)
		sameResult(t, fmt.Sprintf("resumed on %d ranks", ranks), got, errs, want, out)
	}
}

// resumeOn resumes opt on ranks ranks from the disk checkpoints in dir
// (Job.ResumeFrom, logical shards) and returns every rank's result and
// error, the output and rank 0's note.
func resumeOn(t *testing.T, opt Options, dir string, ranks int) ([]RunResult, []error, string, string) {
	var got []RunResult
	var errs []error
	var out, note string
	synctest.Test(t, func(t *testing.T) {
		got, errs, out = runMemJobWith(t, opt, nil, memHooks{
			ranks: ranks,
			ckpt:  func(cc *ckpt.Config) { cc.Dir = t.TempDir() },
			before: func(ctx context.Context, r int, job *Job, ck *ckpt.Checkpointer) error {
				_, n, err := job.ResumeFrom(dir)
				if r == 0 {
					note = n
				}
				return err
			},
		})
	})
	return got, errs, out, note
}

// k-means++ seeding chooses the same starting centroids on 1, 2, 3 and 4
// ranks, with or without logical shards, from generated data and from a
// file, and they are InitPlusPlus's on the whole data set.
func TestPlusPlusAnyRanks(t *testing.T) {
	opt := shardsOptions()
	opt.Seeding = kernel.SeedPlusPlus
	opt.MaxIter = 2
	g := opt.Gen
	pts := make([]float64, g.N*g.D)
	if err := kernel.Generate(g, 0, g.N, pts); err != nil {
		t.Fatal(err)
	}
	want, err := kernel.InitPlusPlus(pts, g.D, opt.K, opt.Seed)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "p.bin")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := points.WriteBinary(f, pts, g.D); err != nil {
		t.Fatal(err)
	}
	f.Close()
	distinct := map[string]bool{}
	for c := 0; c < opt.K; c++ {
		distinct[fmt.Sprint(want[c*g.D:(c+1)*g.D])] = true
	}
	if len(distinct) != opt.K {
		t.Fatalf("k-means++ chose %d distinct centroids of %d", len(distinct), opt.K)
	}
	for _, input := range []string{"", file} {
		for _, shards := range []int{0, 12} {
			for _, ranks := range []int{1, 2, 3, 4} {
				o := opt
				o.Input, o.Shards = input, shards
				memRun(t, o, ranks, memHooks{before: func(_ context.Context, r int, job *Job, _ *ckpt.Checkpointer) error {
					if i := kmtest.SameBits(job.cent, want); i >= 0 {
						t.Errorf("input %q shards %d, %d ranks: rank %d's starting centroids differ at %d", input, shards, ranks, r, i)
					}
					return nil
				}})
			}
		}
	}
}

// Logical shards with Shrink: losing ranks hands their home shards (three
// each of 12) to the next live rank, and a pruned job ends with the bits
// of the failure-free shard-order sums.
func TestShardsShrink(t *testing.T) {
	opt := shrinkOptions()
	opt.Shards = 12
	opt.Kernel.Algo = kernel.AlgoHamerly
	want := shardOrderLloyd(t, opt, opt.Shards)
	synctest.Test(t, func(t *testing.T) {
		got, out := runShrinkJob(t, opt, map[int]int{4: 2, 10: 3})
		if got.Recoveries != 2 {
			t.Fatalf("%d recoveries, want 2\n%s", got.Recoveries, out)
		}
		for _, l := range []string{
			"recovery: rank 2 is vacant: shard 8 (points [4000, 4500)) goes to rank 3; 3 of 4 ranks live",
			"recovery: rank 3 is vacant: shard 11 (points [5500, 6001)) goes to rank 0; 2 of 4 ranks live",
		} {
			if !strings.Contains(out, l+"\n") {
				t.Fatalf("no line %q\n%s", l, out)
			}
		}
		if i := kmtest.SameBits(got.Centroids, want); i >= 0 {
			t.Fatalf("centroids differ from the shard-order sums at %d\n%s", i, out)
		}
	})
}
