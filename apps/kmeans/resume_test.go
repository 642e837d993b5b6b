package kmeans

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/ckpt"
)

// resumeOptions: the in-memory workload without Shrink (4 ranks, a
// checkpoint every 3 iterations, 15 iterations).
func resumeOptions() Options {
	opt := shrinkOptions()
	opt.Shrink = false
	return opt
}

// sameResult fails unless every rank ended with want's centroids, SSE
// (bits) and iteration count.
func sameResult(t *testing.T, what string, got []RunResult, errs []error, want RunResult, out string) {
	t.Helper()
	for r := range got {
		if errs[r] != nil {
			t.Fatalf("%s: rank %d: %v\n%s", what, r, errs[r], out)
		}
		g := got[r]
		if i := kmtest.SameBits(g.Centroids, want.Centroids); i >= 0 {
			t.Fatalf("%s: rank %d: centroids differ at %d", what, r, i)
		}
		if math.Float64bits(g.SSE) != math.Float64bits(want.SSE) || g.Iterations != want.Iterations {
			t.Fatalf("%s: rank %d: sse=%v iterations=%d, want sse=%v iterations=%d\n%s", what, r, g.SSE, g.Iterations, want.SSE, want.Iterations, out)
		}
	}
}

// plainRun is a failure-free in-memory run of opt (rank 0's result).
func plainRun(t *testing.T, opt Options) RunResult {
	t.Helper()
	var res RunResult
	synctest.Test(t, func(t *testing.T) {
		got, errs, out := runMemJob(t, opt, nil)
		sameResult(t, "plain run", got, errs, got[0], out)
		res = got[0]
	})
	if res.SSE == 0 {
		t.Fatalf("a plain run ended with sse=0")
	}
	return res
}

// A job that restores the final checkpoint into a fresh state (a spare
// promoted while the ranks finalize, which then reports) ends with the
// run's SSE, not 0: the checkpoint header carries it.
func TestRestoreFinalCarriesSSE(t *testing.T) {
	opt := resumeOptions()
	want := plainRun(t, opt)
	synctest.Test(t, func(t *testing.T) {
		got, errs, out := runMemJobWith(t, opt, nil, memHooks{
			after: func(ctx context.Context, r int, job *Job, _ RunResult) (RunResult, error) {
				// Forget everything, as a process that never ran the loop.
				job.iter, job.high, job.sse, job.finished = 0, 0, 0, false
				clear(job.hdr)
				clear(job.cent)
				if err := job.restore(ctx); err != nil {
					return RunResult{}, err
				}
				if !job.finished {
					t.Errorf("rank %d: the final checkpoint restored, but the job is not finished", r)
				}
				return job.Run(ctx)
			},
		})
		sameResult(t, "restored final checkpoint", got, errs, want, out)
	})
}

// diskRun runs opt with the disk level in dir, flushed at the end.
func diskRun(t *testing.T, opt Options, dir string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		_, errs, out := runMemJobWith(t, opt, nil, memHooks{
			ckpt: func(cc *ckpt.Config) { cc.Dir = dir },
			after: func(ctx context.Context, _ int, job *Job, res RunResult) (RunResult, error) {
				return res, job.ck.(*ckpt.Checkpointer).FlushDisk(ctx)
			},
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v\n%s", r, err, out)
			}
		}
	})
}

// resumeRun resumes opt from the disk level in dir, as gaspirun --resume
// does, and returns every rank's result and error and rank 0's note.
func resumeRun(t *testing.T, opt Options, dir string) ([]RunResult, []error, string, string) {
	t.Helper()
	var (
		got  []RunResult
		errs []error
		out  string
		note string
	)
	synctest.Test(t, func(t *testing.T) {
		got, errs, out = runMemJobWith(t, opt, nil, memHooks{
			before: func(ctx context.Context, r int, job *Job, ck *ckpt.Checkpointer) error {
				id, err := ck.LoadFromDisk(ctx, dir)
				if err != nil {
					return err
				}
				n, err := job.Resumed(id)
				if r == 0 {
					note = n
				}
				return err
			},
		})
	})
	return got, errs, out, note
}

// Resuming from disk (gaspirun --resume): the final checkpoint of a
// finished run prints that run's result, SSE included; a larger MaxIter
// iterates on from it to the result of a run that long; a smaller one
// than the checkpoint's iteration is refused on every rank; a mid-run
// checkpoint continues to the new MaxIter, even when that is the
// checkpoint's own iteration.
func TestResumeFromDisk(t *testing.T) {
	opt := resumeOptions() // 15 iterations, checkpoints after 3, 6, 9, 12
	dir := t.TempDir()
	diskRun(t, opt, dir)
	want15 := plainRun(t, opt)

	// A run that ended before its final checkpoint: the newest on disk is
	// the one after iteration 12.
	mid := t.TempDir()
	diskRun(t, opt, mid)
	if err := os.RemoveAll(filepath.Join(mid, "ckpt-16")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		maxIter   int
		note      string // a fragment of rank 0's note
		refused   string // a fragment of every rank's error; "" for success
	}{
		{"final", dir, 15, "final one of a finished run (15 iterations, --max-iter 15)", ""},
		{"final, larger max-iter", dir, 18, "iterating on from iteration 15 to --max-iter 18", ""},
		{"final, smaller max-iter", dir, 10, "", "--max-iter 10 is below the 15 iterations the checkpoint already holds"},
		{"mid-run", mid, 15, "continuing to --max-iter 15", ""},
		{"mid-run, max-iter at its iteration", mid, 12, "the checkpointed run had --max-iter 15: continuing to --max-iter 12", ""},
		{"mid-run, smaller max-iter", mid, 11, "", "--max-iter 11 is below the 12 iterations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := opt
			o.MaxIter = c.maxIter
			got, errs, out, note := resumeRun(t, o, c.dir)
			if c.refused != "" {
				for r, err := range errs {
					if err == nil || !strings.Contains(err.Error(), c.refused) {
						t.Fatalf("rank %d: %v, want an error containing %q\n%s", r, err, c.refused, out)
					}
				}
				return
			}
			want := want15
			if c.maxIter != 15 {
				want = plainRun(t, o)
			}
			sameResult(t, "resumed", got, errs, want, out)
			if !strings.Contains(note, c.note) {
				t.Fatalf("note %q, want it to contain %q", note, c.note)
			}
			if c.name == "final" && strings.Contains(out, "iter ") {
				t.Fatalf("a finished run iterated again\n%s", out)
			}
		})
	}
}

func TestCheckInjects(t *testing.T) {
	hosts := []string{"a", "a", "b", "b", "c"} // 4 ranks and a spare on c
	for _, c := range []struct {
		in  Inject
		bad string // a fragment of the error; "" for none
	}{
		{Inject{Rank: 3, MirrorOf: -1, Iter: 1}, ""},
		{Inject{Rank: 4, MirrorOf: -1, Iter: 1}, "kill:rank=4,iter=1: the job has ranks 0..3"},
		{Inject{Rank: -1, MirrorOf: 3, Iter: 2}, ""},
		{Inject{Rank: -1, MirrorOf: 9, Iter: 2}, "kill:mirror-of=9,iter=2: the job has ranks 0..3"},
		{Inject{Rank: -1, MirrorOf: -1, Host: "c", Iter: 1}, ""},
		{Inject{Rank: -1, MirrorOf: -1, Host: "d", Iter: 1}, "kill:host=d,iter=1: no process has that host label; the labels are a, b, c"},
		{Inject{Rank: -1, MirrorOf: -1, Leader: true, Iter: 1}, ""},
	} {
		err := CheckInjects([]Inject{c.in}, 4, hosts)
		if c.bad == "" && err != nil || c.bad != "" && (!errors.Is(err, kernel.ErrConfig) || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("CheckInjects(%+v) = %v, want %q", c.in, err, c.bad)
		}
	}
	if err := CheckInjects([]Inject{{Rank: -1, MirrorOf: -1, Host: "a", Iter: 1}}, 4, nil); err == nil || !strings.Contains(err.Error(), "no host labels") {
		t.Errorf("kill:host without labels: %v", err)
	}
}

// An injection naming a rank the job does not have fails every rank in
// NewJob, before any iteration.
func TestNewJobRefusesMissingRank(t *testing.T) {
	opt := resumeOptions()
	opt.Injects = []Inject{{Rank: 4, MirrorOf: -1, Iter: 2}}
	synctest.Test(t, func(t *testing.T) {
		_, errs, out := runMemJob(t, opt, nil)
		for r, err := range errs {
			if !errors.Is(err, kernel.ErrConfig) || !strings.Contains(err.Error(), "kill:rank=4,iter=2: the job has ranks 0..3") {
				t.Fatalf("rank %d: %v, want the injection refused", r, err)
			}
		}
		if out != "" {
			t.Fatalf("the job worked before refusing the injection:\n%s", out)
		}
	})
}
