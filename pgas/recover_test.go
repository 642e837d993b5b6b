package pgas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// In a job that shrinks, a rank lost with no spare left becomes vacant:
// survivors recover without waiting for a replacement, and GroupAll's
// collectives, SegmentCreate and Finalize run among the live ranks, while
// an operation addressed to the vacant rank fails with ErrVacant (no
// recovery asked).
func TestShrinkLeavesRankVacant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, nw, fm, _ := newFTJob(t, 4, 0)
		fm.mu.Lock()
		fm.shrink = true
		fm.mu.Unlock()
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 64, nil)
			return err
		})
		nw.Kill(0)
		survivors := rts[1:]
		each(t, survivors, func(rt *Runtime) error {
			err := rt.Barrier(ctx, nil)
			if !NeedsRecovery(err) {
				t.Errorf("barrier with a dead rank returned %v, want an error needing recovery", err)
			}
			return rt.Recover(ctx)
		})
		each(t, survivors, func(rt *Runtime) error {
			if rt.Size() != 4 || !rt.Vacant(0) || rt.Vacant(1) || rt.Vacant(4) {
				t.Errorf("rank %d: size %d, vacant(0)=%v vacant(1)=%v", rt.Rank(), rt.Size(), rt.Vacant(0), rt.Vacant(1))
			}
			if got := rt.LiveRanks(); !slices.Equal(got, []int{1, 2, 3}) {
				t.Errorf("rank %d: live ranks %v, want [1 2 3]", rt.Rank(), got)
			}
			if g := rt.GroupAll(); g.Size() != 3 || !slices.Equal(g.Ranks(), []int{1, 2, 3}) {
				t.Errorf("rank %d: GroupAll has %v", rt.Rank(), g.Ranks())
			}
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			x := []int64{int64(rt.Rank())}
			if err := Allreduce(ctx, rt, nil, x, OpSum); err != nil {
				return err
			}
			if x[0] != 6 {
				t.Errorf("rank %d: sum of live ranks = %d, want 6", rt.Rank(), x[0])
			}
			all, err := Allgather(ctx, rt, nil, []int64{int64(rt.Rank()) * 10})
			if err != nil {
				return err
			}
			if !slices.Equal(all, []int64{10, 20, 30}) {
				t.Errorf("rank %d: allgather %v, want [10 20 30]", rt.Rank(), all)
			}
			b := []byte{byte(rt.Rank())}
			if err := rt.Bcast(ctx, nil, b, 2); err != nil {
				return err
			}
			if b[0] != 2 {
				t.Errorf("rank %d: bcast from rank 2 gave %d", rt.Rank(), b[0])
			}
			// A survivor keeps its segment; the sizes it learns leave the
			// vacant rank out.
			if _, err := rt.SegmentCreate(ctx, 1, 64, nil); err != nil {
				return err
			}
			next := rt.Rank()%3 + 1
			if err := rt.Write(ctx, 0, next, Loc{1, 0}, Loc{1, 8}, 8); err != nil {
				return err
			}
			if err := rt.Wait(ctx, 0); err != nil {
				return err
			}
			err = rt.Write(ctx, 0, 0, Loc{1, 0}, Loc{1, 0}, 8)
			if !errors.Is(err, ErrVacant) || NeedsRecovery(err) {
				t.Errorf("rank %d: write to the vacant rank = %v, want ErrVacant and no recovery", rt.Rank(), err)
			}
			return nil
		})
		g, err := rts[1].NewGroup(5, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Barrier(ctx, g); !errors.Is(err, ErrVacant) {
			t.Fatalf("barrier on a group with the vacant rank = %v, want ErrVacant", err)
		}
		// Every member of such a group fails at once, none waits on the
		// others (whatever the algorithm routes through).
		each(t, survivors, func(rt *Runtime) error {
			g, err := rt.NewGroup(6, []int{0, 1, 2, 3})
			if err != nil {
				return err
			}
			if err := rt.Barrier(ctx, g); !errors.Is(err, ErrVacant) {
				t.Errorf("rank %d: barrier on a group with the vacant rank = %v, want ErrVacant", rt.Rank(), err)
			}
			return nil
		})
		each(t, survivors, func(rt *Runtime) error { return rt.Finalize(ctx) })
		if !slices.Equal(fm.finished, []transport.Proc{1}) {
			t.Fatalf("Finish called by %v, want only proc 1 (the lowest live rank)", fm.finished)
		}
	})
}

// Rule: Recover does not return while a frame of an older epoch is still
// landing (admitted before the view changed, its payload still arriving):
// it would otherwise land on top of the state the program restores.
func TestRecoverWaitsForLandingFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJob(t, 3, 1)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		// Rank 0 is applying a frame that proc 1 sent in epoch 0 (proc 1,
		// about to die, sends nothing more that would reset it).
		rts[0].peers.get(1).landing.Store(0 + 1)
		nw.Kill(1)
		done := make(chan error, 1)
		go func() {
			err := rts[0].Barrier(ctx, nil)
			if !NeedsRecovery(err) {
				done <- err
				return
			}
			done <- rts[0].Recover(ctx)
		}()
		go func() {
			err := rts[2].Barrier(ctx, nil)
			if NeedsRecovery(err) {
				err = rts[2].Recover(ctx)
			}
			if err != nil {
				t.Errorf("rank 2: %v", err)
			}
		}()
		spare := <-promoted
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Recover returned (%v) while an epoch-0 frame was landing", err)
		default:
		}
		if rts[0].appEpoch.Load() != 0 {
			t.Fatalf("the program acknowledged epoch %d while an epoch-0 frame was landing", rts[0].appEpoch.Load())
		}
		rts[0].peers.get(1).landing.Store(0)
		if err := <-done; err != nil {
			t.Fatalf("Recover after the frame landed: %v", err)
		}
		if rts[0].Epoch() != spare.Epoch() {
			t.Fatalf("rank 0 in epoch %d, spare in %d", rts[0].Epoch(), spare.Epoch())
		}
	})
}

// Rule: a membership change under Finalize (here an idle spare dies) is
// returned with the runtime left open: the ranks recover together and
// finalize again.
func TestFinalizeAfterSpareLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, nw, fm, _ := newFTJob(t, 3, 1)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		nw.Kill(3)
		for _, rt := range rts {
			for rt.Epoch() == 0 {
				time.Sleep(10 * time.Millisecond) // fake time (synctest)
			}
		}
		if !slices.Equal(fm.reports, []transport.Proc{3}) {
			t.Fatalf("failures reported: %v", fm.reports)
		}
		each(t, rts, func(rt *Runtime) error {
			err := rt.Finalize(ctx)
			if !NeedsRecovery(err) {
				return fmt.Errorf("Finalize in a stale epoch: %v, want an error needing recovery", err)
			}
			if err := rt.Recover(ctx); err != nil {
				return err
			}
			return rt.Finalize(ctx)
		})
		if !fm.cur.Finished {
			t.Fatal("the job was not recorded as finished")
		}
	})
}
