package ckpt

import (
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/pgas"
)

// A rank killed during the collective setup is recovered like a failure
// in the loop: the survivors' New returns the Checkpointer with an error
// that needs recovery (a rank that failed an earlier collective of its
// setup makes its Checkpointer with NewJoining instead), they register
// their regions, Recover, and Restore finishes the setup with the
// promoted spare (nothing committed yet: id 0). Afterwards the job
// checkpoints, loses another rank and restores, as a job that never
// failed would.
func TestKillDuringSetup(t *testing.T) {
	for _, step := range []string{"before New", "local segment", "mirror segment"} {
		t.Run(step, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newTestJob(t, jobOpts{ranks: 4, spares: 2, ft: true, lazy: true})
				ctx := j.ctx
				const victim = 2
				j.fm.Hold(1)
				fired := make(chan struct{})
				ms := make([]*member, len(j.ranks))
				errs := j.during(fired, victim, func(r int) error {
					rt := j.ranks[r].rt
					if _, err := rt.SegmentCreate(ctx, appSeg, 4096, nil); err != nil {
						return err
					}
					if r == victim {
						// The victim gets as far as the step, and dies once
						// its frames arrived (the others wait in the step).
						var err error
						if step == "mirror segment" {
							_, err = rt.SegmentCreate(ctx, j.cfg.SegmentID, localSizeOf(j.cfg, rt.Size()), nil)
						}
						synctest.Wait()
						j.nw.Kill(rt.Proc())
						close(fired)
						return err
					}
					mk := New
					if step == "before New" {
						// The program's collective before New fails.
						if err := rt.Barrier(ctx, nil); !pgas.NeedsRecovery(err) {
							t.Errorf("rank %d: Barrier = %v, want an error that needs recovery", r, err)
						}
						mk = NewJoining
					}
					var err error
					ms[r], err = j.setupMember(ctx, rt, mk)
					return err
				})
				for r, err := range errs {
					if r == victim {
						continue
					}
					if ms[r] == nil {
						t.Fatalf("rank %d: no Checkpointer: %v", r, err)
					}
					if want := step != "before New"; want != pgas.NeedsRecovery(err) {
						t.Fatalf("rank %d: setup error %v; want one that needs recovery: %v", r, err, want)
					}
					j.ranks[r] = ms[r]
				}
				if id := j.recoverAll([]int{victim}, nil); id != 0 {
					t.Fatalf("restored %d, want 0 (nothing committed)", id)
				}
				j.checkpoint(1)
				j.checkMirrors(1)
				j.advance(2)
				j.kill(1)
				if id := j.recoverAll([]int{1}, nil); id != 1 {
					t.Fatalf("restored %d after the second kill, want 1", id)
				}
				j.checkAll(1)
				j.waitProtected()
				j.checkpoint(2)
				j.checkMirrors(2)
			})
		})
	}
}

// localSizeOf is the size of the local segment of a Checkpointer with
// cfg in a job of n ranks.
func localSizeOf(cfg Config, n int) int64 {
	return (&Checkpointer{slot: headerArea + (cfg.MaxBytes+63)/64*64}).localSize(n)
}
