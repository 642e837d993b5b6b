package pgas_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
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
		fm.SetShrink(true)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 64, nil)
			return err
		})
		nw.Kill(0)
		survivors := rts[1:]
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			err := rt.Barrier(ctx, nil)
			if !pgas.NeedsRecovery(err) {
				t.Errorf("barrier with a dead rank returned %v, want an error needing recovery", err)
			}
			return rt.Recover(ctx)
		})
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
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
			if err := pgas.Allreduce(ctx, rt, nil, x, pgas.OpSum); err != nil {
				return err
			}
			if x[0] != 6 {
				t.Errorf("rank %d: sum of live ranks = %d, want 6", rt.Rank(), x[0])
			}
			all, err := pgas.Allgather(ctx, rt, nil, []int64{int64(rt.Rank()) * 10})
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
			if err := rt.Write(ctx, 0, next, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 8}, 8); err != nil {
				return err
			}
			if err := rt.Wait(ctx, 0); err != nil {
				return err
			}
			err = rt.Write(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 0}, 8)
			if !errors.Is(err, pgas.ErrVacant) || pgas.NeedsRecovery(err) {
				t.Errorf("rank %d: write to the vacant rank = %v, want ErrVacant and no recovery", rt.Rank(), err)
			}
			return nil
		})
		g, err := rts[1].NewGroup(5, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Barrier(ctx, g); !errors.Is(err, pgas.ErrVacant) {
			t.Fatalf("barrier on a group with the vacant rank = %v, want ErrVacant", err)
		}
		// Every member of such a group fails at once, none waits on the
		// others (whatever the algorithm routes through).
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			g, err := rt.NewGroup(6, []int{0, 1, 2, 3})
			if err != nil {
				return err
			}
			if err := rt.Barrier(ctx, g); !errors.Is(err, pgas.ErrVacant) {
				t.Errorf("rank %d: barrier on a group with the vacant rank = %v, want ErrVacant", rt.Rank(), err)
			}
			return nil
		})
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error { return rt.Finalize(ctx) })
		if !slices.Equal(fm.Finished(), []transport.Proc{1}) {
			t.Fatalf("Finish called by %v, want only proc 1 (the lowest live rank)", fm.Finished())
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
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		// Rank 0 is applying a frame that proc 1 sent in epoch 0 (proc 1,
		// about to die, sends nothing more that would reset it).
		pgas.SetLanding(rts[0], 1, 0+1)
		nw.Kill(1)
		done := make(chan error, 1)
		go func() {
			err := rts[0].Barrier(ctx, nil)
			if !pgas.NeedsRecovery(err) {
				done <- err
				return
			}
			done <- rts[0].Recover(ctx)
		}()
		go func() {
			err := rts[2].Barrier(ctx, nil)
			if pgas.NeedsRecovery(err) {
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
		if pgas.AppEpoch(rts[0]) != 0 {
			t.Fatalf("the program acknowledged epoch %d while an epoch-0 frame was landing", pgas.AppEpoch(rts[0]))
		}
		pgas.SetLanding(rts[0], 1, 0)
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
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		nw.Kill(3)
		for _, rt := range rts {
			for rt.Epoch() == 0 {
				time.Sleep(10 * time.Millisecond) // fake time (synctest)
			}
		}
		if !slices.Equal(fm.Reports(), []transport.Proc{3}) {
			t.Fatalf("failures reported: %v", fm.Reports())
		}
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			err := rt.Finalize(ctx)
			if !pgas.NeedsRecovery(err) {
				return fmt.Errorf("Finalize in a stale epoch: %v, want an error needing recovery", err)
			}
			if err := rt.Recover(ctx); err != nil {
				return err
			}
			return rt.Finalize(ctx)
		})
		if !fm.Current().Finished {
			t.Fatal("the job was not recorded as finished")
		}
	})
}

// Rule: after Recover, a spare on another host holds the lost rank and
// the collectives go on in two levels over the new placement (three with
// racks, the lost one a rack's leader); Allreduce gives the bits it gave
// before the failure.
func TestCollectivesAfterRecoverOnAnotherHost(t *testing.T) {
	t.Run("hosts", func(t *testing.T) { collectivesAfterRecover(t, []string{"a", "a", "b", "b", "c"}, nil, 1) })
	// Racks x (hosts a and b) and y (c and, with the spare, d), before and
	// after: the victim leads host a and rack x.
	t.Run("racks", func(t *testing.T) {
		collectivesAfterRecover(t, []string{"a", "a", "b", "c", "d"}, []string{"x", "x", "x", "y", "y"}, 0)
	})
}

// collectivesAfterRecover runs 4 ranks and a spare (process 4, alone on
// its host, the last of hosts) on hosts, with racks by process if not
// nil, and kills process victim.
func collectivesAfterRecover(t *testing.T, hosts, racks []string, victim int) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJobOn(t, 4, 1, hosts, func(c *pgas.Config) { c.Racks = racks })
		ctx := context.Background()
		before := make([][]float64, 4)
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			data := pgas.Inputs(rt.Rank(), 33)
			if err := pgas.Allreduce(ctx, rt, nil, data, pgas.OpSum); err != nil {
				return err
			}
			before[rt.Rank()] = data
			return nil
		})
		nw.Kill(transport.Proc(victim))
		var survivors []*pgas.Runtime
		for p, rt := range rts {
			if p != victim {
				survivors = append(survivors, rt)
			}
		}
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			if err := rt.Barrier(ctx, nil); !pgas.NeedsRecovery(err) {
				t.Errorf("barrier with a dead rank returned %v, want an error needing recovery", err)
			}
			return rt.Recover(ctx)
		})
		spare := <-promoted
		if spare.Rank() != victim || spare.Host(victim) != hosts[4] {
			t.Fatalf("promoted spare holds rank %d on host %q", spare.Rank(), spare.Host(victim))
		}
		job := append([]*pgas.Runtime{spare}, survivors...)
		pgas.Each(t, job, func(rt *pgas.Runtime) error {
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			data := pgas.Inputs(rt.Rank(), 33)
			if err := pgas.Allreduce(ctx, rt, nil, data, pgas.OpSum); err != nil {
				return err
			}
			if !pgas.BitsEqual(data, before[0]) {
				t.Errorf("rank %d: allreduce after recovery differs from before", rt.Rank())
			}
			buf := []byte{0, 0, 0}
			if rt.Rank() == victim {
				copy(buf, "abc")
			}
			if err := rt.Bcast(ctx, nil, buf, victim); err != nil {
				return err
			}
			if string(buf) != "abc" {
				t.Errorf("rank %d: bcast from the promoted spare gave %q", rt.Rank(), buf)
			}
			out, err := pgas.Allgather(ctx, rt, nil, []int64{int64(rt.Rank())})
			if err != nil {
				return err
			}
			for r, v := range out {
				if v != int64(r) {
					t.Errorf("rank %d: allgather %v", rt.Rank(), out)
					break
				}
			}
			return nil
		})
	})
}

// Fencing: a process that maps a survivor's segment from before a
// recovery (as a replaced process, stopped and resumed, does) changes
// nothing there afterwards, while the survivors, having recreated the
// segment, write to each other directly in the new epoch.
func TestDirectRecoverFencesOldMappings(t *testing.T) {
	pgas.DirectMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJobOn(t, 3, 1, nil, pgas.Direct)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		// What process 1 holds of process 2's segment, as it would ask
		// for it: process 2 records process 1 as holding its memory.
		fd, _, err := pgas.ProvideMemory(rts[2], 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		stale, err := segments.MapFD(fd, 4096)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		defer segments.UnmapShared(stale)
		seg1, _ := rts[1].Segment(1)
		copy(seg1.Bytes(), "kept!!!!")
		if err := rts[1].Write(ctx, 0, 2, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 0}, 8); err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if rts[1].Stats().DirectWrites != 1 {
			t.Fatal("the write before the failure was not direct")
		}
		nw.Kill(1)
		survivors := []*pgas.Runtime{rts[0], rts[2]}
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			rt.Barrier(ctx, nil)
			return rt.Recover(ctx)
		})
		spare := <-promoted
		job := []*pgas.Runtime{rts[0], spare, rts[2]}
		pgas.Each(t, job, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		copy(stale[64:], "stale write")
		seg2, _ := rts[2].Segment(1)
		if bytes.Contains(seg2.Bytes(), []byte("stale write")) {
			t.Fatal("a mapping from before the recovery changed a survivor's segment")
		}
		seg0, _ := rts[0].Segment(1)
		copy(seg0.Bytes()[128:], "new epoch")
		before := rts[0].Stats().DirectWrites
		if err := rts[0].WriteNotify(ctx, 0, 2, pgas.Loc{Seg: 1, Off: 128}, pgas.Loc{Seg: 1, Off: 128}, 9, 1, 1); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if string(seg2.Bytes()[128:137]) != "new epoch" {
			t.Fatalf("survivor's write in the new epoch: %q", seg2.Bytes()[128:137])
		}
		if rts[0].Stats().DirectWrites != before+1 {
			t.Fatal("the write in the new epoch was not direct")
		}
		if string(seg2.Bytes()[:8]) != "kept!!!!" {
			t.Fatalf("the segment holds %q after the move, want what was written before", seg2.Bytes()[:8])
		}
	})
}

// Recover moves a shared segment only when a process it gave its memory
// to failed: a process that never asked for it cannot write it, so a move
// would cost the recovery a copy for nothing. Process 1 writes directly to
// process 0 (so holds its memory) in the first case only.
func TestDirectMoveOnlyForHolders(t *testing.T) {
	pgas.DirectMapped(t)
	for _, c := range []struct {
		name   string
		victim transport.Proc
		wrote  bool
	}{{"a holder", 1, true}, {"not a holder", 1, false}, {"another host", 2, false}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rts, promoted, nw, _, _ := newFTJobOn(t, 3, 1, []string{"a", "a", "b", "a"}, pgas.Direct)
				ctx := context.Background()
				pgas.Each(t, rts, func(rt *pgas.Runtime) error {
					_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
					return err
				})
				seg0, _ := rts[0].Segment(1)
				copy(seg0.Bytes(), "before")
				ino := func() uint64 {
					ino, err := pgas.SegmentInode(rts[0], 1)
					if err != nil {
						t.Fatal(err)
					}
					return ino
				}
				before := ino()
				if c.wrote {
					if err := rts[c.victim].Write(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 512}, pgas.Loc{Seg: 1, Off: 512}, 8); err != nil {
						t.Fatal(err)
					}
					if err := rts[c.victim].Wait(ctx, 0); err != nil || rts[c.victim].Stats().DirectWrites != 1 {
						t.Fatalf("the victim's write: %v after %d direct writes, want 1", err, rts[c.victim].Stats().DirectWrites)
					}
				}
				nw.Kill(c.victim)
				var survivors []*pgas.Runtime
				for p, rt := range rts {
					if transport.Proc(p) != c.victim {
						survivors = append(survivors, rt)
					}
				}
				pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
					rt.Barrier(ctx, nil)
					return rt.Recover(ctx)
				})
				spare := <-promoted
				job := append(survivors, spare)
				pgas.Each(t, job, func(rt *pgas.Runtime) error {
					_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
					return err
				})
				if moved := ino() != before; moved != c.wrote {
					t.Fatalf("process %d failed: process 0's segment moved=%v, want %v", c.victim, moved, c.wrote)
				}
				if string(seg0.Bytes()[:6]) != "before" {
					t.Fatalf("process 0's segment holds %q after the recovery", seg0.Bytes()[:6])
				}
				// Writes between the survivors are direct again in the new
				// epoch, whether the memory moved or not.
				other := survivors[1]
				n := other.Stats().DirectWrites
				if err := other.WriteNotify(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 64}, pgas.Loc{Seg: 1, Off: 64}, 8, 1, 1); err != nil {
					t.Fatal(err)
				}
				if err := other.Wait(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if other.Stats().DirectWrites != n+1 {
					t.Fatal("the write in the new epoch was not direct")
				}
			})
		})
	}
}

// A peer's frame from a newer epoch means that epoch was committed:
// Recover waits until this process applied it, instead of returning in
// the older epoch, where a retried restore pairs its collectives with
// another laggard's, out of step (chaos, three hosts, seed 474: "allgather:
// 16 bytes from a peer, 40 here").
func TestRecoverWaitsForAnEpochAPeerIsIn(t *testing.T) {
	rts, _, _, fm, handles := newFTJobOn(t, 2, 1, nil)
	ctx := context.Background()
	pgas.Each(t, rts, func(rt *pgas.Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	// recoverTo recovers rt until it is in epoch e (Recover without a
	// failure seen returns in the view it has; the next one is applied
	// in the background).
	recoverTo := func(rt *pgas.Runtime, e uint64) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); rt.Epoch() < e; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("process %d: in epoch %d, want epoch %d", rt.Proc(), rt.Epoch(), e)
			}
		}
		if err := rt.Recover(ctx); err != nil {
			t.Fatalf("process %d: Recover = %v in epoch %d", rt.Proc(), err, e)
		}
	}
	// Both move on once (neither has then a failure left to recover
	// from), then process 1 stays behind.
	e1 := fm.Advance()
	recoverTo(rts[0], e1)
	recoverTo(rts[1], e1)
	handles[1].Pause(true)
	e := fm.Advance()
	recoverTo(rts[0], e)
	if err := rts[0].Notify(ctx, 0, 1, 1, 3, 7); err != nil {
		t.Fatal(err)
	}
	// The notification (of epoch e, ahead) lands at process 1.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := rts[1].NotifyWaitSome(wctx, 1, 3, 1); err != nil {
		t.Fatalf("process 1 did not get the frame of epoch %d: %v", e, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer rcancel()
	if err := rts[1].Recover(rctx); err == nil {
		t.Fatalf("process 1 recovered in epoch %d while a peer is in epoch %d", rts[1].Epoch(), e)
	}
	handles[1].Pause(false)
	recoverTo(rts[1], e)
}
