package ckpt

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/pgas"
)

// recoverShrunk recovers the survivors of a job that shrank: the killed
// ranks are vacant (no spare takes them), every other rank recovers,
// rejoins its segments and restores. It returns the restored id.
func (j *testJob) recoverShrunk(vacant []int) uint64 {
	j.t.Helper()
	for _, r := range vacant {
		j.ranks[r] = nil
	}
	live := j.live()
	ids := make([]uint64, len(j.ranks))
	j.each(live, func(r int) error {
		rt := j.ranks[r].rt
		if err := rt.Recover(j.ctx); err != nil {
			return err
		}
		for _, v := range vacant {
			if !rt.Vacant(v) {
				return errors.New("the view after the recovery does not leave the killed rank vacant")
			}
		}
		return retry(rt, func() error {
			if _, err := rt.SegmentCreate(j.ctx, appSeg, 4096, nil); err != nil {
				return err
			}
			var err error
			ids[r], err = j.ranks[r].ck.Restore(j.ctx)
			return err
		})
	})
	for _, r := range live {
		if ids[r] != ids[live[0]] {
			j.t.Fatalf("ranks restored different ids: %v", ids)
		}
	}
	return ids[live[0]]
}

// In a job that shrinks, a rank lost with no spare left becomes vacant:
// the survivors restore their own snapshots (the vacant rank's is not
// needed), the mirrors are placed again over the live ranks only, the
// copies that moved are rebuilt, and checkpoints go on among the
// survivors, surviving one more loss.
func TestShrinkRestoresSurvivors(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(map[int]string{1: "mirrors=1", 2: "mirrors=2"}[k], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newTestJob(t, jobOpts{ranks: 4, mirrors: k, ft: true, shrink: true})
				j.checkpoint(1)
				j.checkpoint(2)
				j.advance(3) // survivors must roll back
				j.kill(2)
				if id := j.recoverShrunk([]int{2}); id != 2 {
					t.Fatalf("restored %d, want 2", id)
				}
				j.checkAll(2)
				for _, r := range j.live() {
					ck := j.ranks[r].ck
					if h := ck.Holders(2); len(h) != 0 {
						t.Fatalf("rank %d: the vacant rank 2 has holders %v", r, h)
					}
					for _, src := range j.live() {
						hs := ck.Holders(src)
						if len(hs) != k || slices.Contains(hs, 2) || slices.Contains(hs, src) {
							t.Fatalf("rank %d: holders of rank %d are %v, want %d live ranks other than it", r, src, hs, k)
						}
					}
					if st := ck.Stats(); st.Fetched != 0 || st.Restores != 1 {
						t.Fatalf("rank %d: stats %+v, want one restore from its own copy", r, st)
					}
				}
				j.waitProtected()
				j.checkMirrors(2)
				j.checkpoint(3)
				j.checkMirrors(3)

				// A second loss: rank 0, the lowest rank, goes too.
				j.advance(4)
				j.kill(0)
				if id := j.recoverShrunk([]int{0}); id != 3 {
					t.Fatalf("second restore: %d, want 3", id)
				}
				j.checkAll(3)
				j.waitProtected()
				j.checkpoint(4)
				j.checkMirrors(4)
			})
		})
	}
}

// The disk level keeps one file per rank and cannot follow a job that
// shrank: Restore says so instead of writing incomplete checkpoints.
func TestShrinkRefusesDiskLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3, ft: true, shrink: true, dir: t.TempDir()})
		j.checkpoint(1)
		j.kill(1)
		j.ranks[1] = nil
		j.each(j.live(), func(r int) error {
			rt := j.ranks[r].rt
			if err := rt.Recover(context.Background()); err != nil {
				return err
			}
			return retry(rt, func() error {
				if _, err := rt.SegmentCreate(j.ctx, appSeg, 4096, nil); err != nil {
					return err
				}
				_, err := j.ranks[r].ck.Restore(j.ctx)
				if pgas.NeedsRecovery(err) {
					return err
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("rank %d: Restore with a vacant rank and a disk level = %v, want ErrInvalid", r, err)
				}
				return nil
			})
		})
	})
}
