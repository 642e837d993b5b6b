package ckpt

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// A killed rank's state comes back on the promoted spare bit for bit: the
// spare reads it from the holder, survivors restore their own, and the job
// goes on checkpointing with the spare.
func TestSpareRestoresKilledRank(t *testing.T) {
	old := readChunk
	readChunk = 1000 // the spare's fetch takes several reads
	t.Cleanup(func() { readChunk = old })
	for _, k := range []int{1, 2} {
		t.Run(map[int]string{1: "mirrors=1", 2: "mirrors=2"}[k], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newTestJob(t, jobOpts{ranks: 4, spares: 1, mirrors: k, ft: true})
				j.checkpoint(1)
				j.checkpoint(2)
				j.advance(3) // survivors must roll back
				j.kill(2)
				id := j.recoverAll([]int{2}, nil)
				if id != 2 {
					t.Fatalf("restored %d, want 2", id)
				}
				j.checkAll(2)
				spare := j.ranks[2]
				if spare.rt.Proc() != 4 {
					t.Fatalf("rank 2 is proc %d, want the spare 4", spare.rt.Proc())
				}
				if st := spare.ck.Stats(); st.Fetched != 1 || st.Restores != 1 {
					t.Fatalf("spare stats %+v, want one fetched restore", st)
				}
				j.waitProtected()
				// Rank 1 held rank 2's... no: rank 2's holders lost nothing;
				// the holders of the ranks that mirrored on 2 got a rebuild.
				for r, m := range j.ranks {
					st := m.ck.Stats()
					if len(st.Unprotected) != 1 {
						t.Fatalf("rank %d: %d unprotected windows recorded, want 1", r, len(st.Unprotected))
					}
				}
				j.checkMirrors(2)
				j.checkpoint(3)
				j.checkMirrors(3)
			})
		})
	}
}

// killOnFrame holds the membership and arms a BeforeFrame hook that kills
// proc victim (and drops the frame) at the first frame from it that match
// accepts. The returned channel closes when it fired.
func (j *testJob) killOnFrame(victim transport.Proc, match func(h *transport.Header) bool) <-chan struct{} {
	j.fm.Hold(1)
	var fired atomic.Bool
	done := make(chan struct{})
	j.nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
		if from != victim || !match(h) {
			return mem.Deliver
		}
		if fired.CompareAndSwap(false, true) {
			j.nw.Kill(victim)
			close(done)
		}
		return mem.DropFrame
	})
	return done
}

// during runs f for every rank in the background, waits for the kill,
// settles the failure, and returns f's results.
func (j *testJob) during(fired <-chan struct{}, victim int, f func(r int) error) []error {
	j.t.Helper()
	errs := make([]error, len(j.ranks))
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for r := range j.ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = f(r)
			}()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-fired:
	case <-done:
		j.t.Fatal("the operations finished without the kill")
	}
	j.nw.BeforeFrame(nil)
	j.settle([]int{victim})
	<-done
	return errs
}

// A rank killed in the middle of its push of checkpoint 2 leaves its
// holder's slot for 2 invalid, never checkpoint 1's slot: 1 is restored.
func TestKillDuringPush(t *testing.T) {
	cases := map[string]func(h *transport.Header) bool{
		// The first frame of the push: the header-clearing write.
		"at-clear": func(h *transport.Header) bool { return h.Type == transport.FrameWrite },
		// The last frame: payload written, header not.
		"at-header": func(h *transport.Header) bool {
			return h.Type == transport.FrameWrite && h.Flags&transport.FlagNotify != 0
		},
	}
	for name, match := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newTestJob(t, jobOpts{ranks: 4, spares: 1, ft: true})
				j.checkpoint(1)
				const victim = 1
				mirror := j.cfg.SegmentID + 1
				fired := j.killOnFrame(victim, func(h *transport.Header) bool {
					return h.Seg == uint16(mirror) && match(h)
				})
				ctx := j.ctx
				errs := j.during(fired, victim, func(r int) error {
					m := j.ranks[r]
					m.fill(r, 2)
					if err := m.ck.Start(ctx, 2); err != nil {
						return err
					}
					if r == victim {
						return nil // it dies in the background
					}
					return m.ck.Commit(ctx, 2)
				})
				for r, err := range errs {
					if r != victim && (err == nil || !pgas.NeedsRecovery(err)) {
						t.Fatalf("rank %d: Commit(2) = %v, want an error that needs recovery", r, err)
					}
				}
				id := j.recoverAll([]int{victim}, nil)
				if id != 1 {
					t.Fatalf("restored %d, want 1 (2 was never complete on the victim's holder)", id)
				}
				j.checkAll(1)
				j.waitProtected()
				j.checkpoint(2)
				j.checkAll(2)
			})
		})
	}
}

// A rank killed during Commit's agreement, after every push completed:
// whatever each survivor concluded, they agree on a complete checkpoint,
// which here must be 2 (every rank and holder has it).
func TestKillDuringCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4, spares: 1, ft: true})
		j.checkpoint(1)
		const victim = 3
		ctx := j.ctx
		j.each(indexes(4), func(r int) error {
			m := j.ranks[r]
			m.fill(r, 2)
			if err := m.ck.Start(ctx, 2); err != nil {
				return err
			}
			_, err := waitPush(m.ck, 2)
			return err
		})
		// The victim dies at its first message of the agreement.
		fired := j.killOnFrame(victim, func(h *transport.Header) bool { return h.Type == transport.FrameColl })
		results := j.during(fired, victim, func(r int) error { return j.ranks[r].ck.Commit(ctx, 2) })
		for r, err := range results {
			if r != victim && err == nil {
				t.Fatalf("rank %d: Commit(2) succeeded without the victim", r)
			}
		}
		id := j.recoverAll([]int{victim}, nil)
		if id != 2 {
			t.Fatalf("restored %d, want 2", id)
		}
		j.checkAll(2)
	})
}

// waitPush waits for the push of checkpoint id without committing.
func waitPush(c *Checkpointer, id uint64) (*job, error) {
	c.mu.Lock()
	jb := c.pending
	c.mu.Unlock()
	if jb == nil || jb.id != id {
		return nil, errors.New("no pending push")
	}
	<-jb.done
	return jb, jb.err
}

// After a restore the rebuild gives the dead rank's replacement the
// mirrors it must hold; killing a survivor whose only mirror lives on the
// replacement loses nothing.
func TestKillHolderAfterRebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4, spares: 2, ft: true})
		j.checkpoint(1)
		j.advance(2)
		// Rank 0's mirror is on rank 1.
		if hs := j.ranks[0].ck.Holders(0); !slices.Equal(hs, []int{1}) {
			t.Fatalf("holders of 0: %v", hs)
		}
		j.kill(1)
		if id := j.recoverAll([]int{1}, nil); id != 1 {
			t.Fatalf("restored %d", id)
		}
		j.waitProtected()
		if st := j.ranks[0].ck.Stats(); st.Rebuilds != 1 {
			t.Fatalf("rank 0 rebuilds %d, want 1 (its holder was replaced)", st.Rebuilds)
		}
		if st := j.ranks[3].ck.Stats(); st.Rebuilds != 0 {
			t.Fatalf("rank 3 rebuilds %d, want 0 (its holder 0 survived)", st.Rebuilds)
		}
		// Now rank 0 dies: its state must come from the new rank 1.
		for _, m := range j.ranks {
			m.scribble()
		}
		j.kill(0)
		if id := j.recoverAll([]int{0}, nil); id != 1 {
			t.Fatalf("restored %d", id)
		}
		j.checkAll(1)
		if st := j.ranks[0].ck.Stats(); st.Fetched != 1 {
			t.Fatalf("new rank 0 did not fetch: %+v", st)
		}
	})
}

// With host labels, mirrors cross hosts: losing every rank of one host
// loses no checkpoint.
func TestLoseWholeHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := []string{"a", "a", "b", "b", "c", "c"}
		j := newTestJob(t, jobOpts{ranks: 4, spares: 2, ft: true, hosts: hosts})
		for r, m := range j.ranks {
			for _, h := range m.ck.Holders(r) {
				if hosts[h] == hosts[r] {
					t.Fatalf("rank %d (host %s) mirrors on rank %d of the same host", r, hosts[r], h)
				}
			}
		}
		j.checkpoint(1)
		j.checkpoint(2)
		j.advance(3)
		j.kill(0, 1) // host a
		if id := j.recoverAll([]int{0, 1}, nil); id != 2 {
			t.Fatalf("restored %d, want 2", id)
		}
		j.checkAll(2)
		j.waitProtected()
		j.checkMirrors(2)
	})
}

// A spare on another host changes the placement (a holder must hold more
// snapshots): the mirror segments move to the other segment ID, and the
// job stays protected under the new placement.
func TestPlacementChangeMovesMirrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := []string{"a", "a", "b", "b", "b", "a"}
		j := newTestJob(t, jobOpts{ranks: 4, spares: 2, ft: true, hosts: hosts})
		j.checkpoint(1)
		j.advance(2)
		before := j.ranks[1].ck.Holders(0)
		j.kill(0) // replaced by proc 4 on host b
		if id := j.recoverAll([]int{0}, nil); id != 1 {
			t.Fatalf("restored %d", id)
		}
		j.checkAll(1)
		after := j.ranks[1].ck.Holders(0)
		// a,a,b,b: ring 0,2,1,3 and 0 -> 2. b,a,b,b: ring 0,1,2,3, and rank
		// 1, alone on host a, holds the snapshots of 0, 2 and 3.
		if !slices.Equal(before, []int{2}) || !slices.Equal(after, []int{1}) {
			t.Fatalf("holders of 0: %v -> %v, want [2] -> [1]", before, after)
		}
		if got := j.ranks[1].ck.mirrorID; got != j.cfg.SegmentID+2 {
			t.Fatalf("mirror segment %d after the placement change, want %d", got, j.cfg.SegmentID+2)
		}
		if _, err := j.ranks[1].rt.Segment(j.cfg.SegmentID + 1); err == nil {
			t.Fatal("the old mirror segment was not deleted")
		}
		j.waitProtected()
		j.checkMirrors(1)
		j.checkpoint(2)
		j.checkMirrors(2)
		// Lose the rank that now holds three snapshots.
		busiest := 0
		for r := range j.ranks {
			if j.ranks[r].ck.lay.capacity(r) > j.ranks[busiest].ck.lay.capacity(busiest) {
				busiest = r
			}
		}
		j.advance(3)
		j.kill(busiest)
		if id := j.recoverAll([]int{busiest}, nil); id != 2 {
			t.Fatalf("restored %d", id)
		}
		j.checkAll(2)
	})
}

// Restore on a job that never committed reports ErrNoCheckpoint on every
// rank and leaves the checkpointer usable.
func TestRestoreNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3})
		ctx := j.ctx
		j.each(indexes(3), func(r int) error {
			_, err := j.ranks[r].ck.Restore(ctx)
			if !errors.Is(err, ErrNoCheckpoint) {
				return err
			}
			return nil
		})
		j.checkpoint(1)
		j.checkMirrors(1)
	})
}

// With two mirrors, two neighbouring ranks may die at once.
func TestTwoFailuresTwoMirrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 5, spares: 2, mirrors: 2, ft: true})
		j.checkpoint(1)
		j.advance(2)
		j.kill(1, 2) // rank 1's holders are 2 and 3; rank 2's are 3 and 4
		if id := j.recoverAll([]int{1, 2}, nil); id != 1 {
			t.Fatalf("restored %d", id)
		}
		j.checkAll(1)
		j.waitProtected()
		j.checkMirrors(1)
	})
}

// Losing a rank together with its only holder is beyond one mirror:
// every rank gets ErrNoCheckpoint, with a message that says so.
func TestBeyondRedundancy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4, spares: 2, ft: true})
		j.checkpoint(1)
		j.kill(1, 2) // rank 1's only holder is rank 2
		errs := j.restoreErrs([]int{1, 2})
		for r, err := range errs {
			if !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "disk level") {
				t.Fatalf("rank %d: Restore = %v, want ErrNoCheckpoint suggesting the disk level", r, err)
			}
		}
	})
}

// A promoted spare whose holders all fail to deliver its snapshot (here
// the copy is damaged after the holder reported it intact) cannot
// restore: every rank gets ErrRestoreFailed, the spare's naming the
// holder, and the checkpointer wants another restore.
func TestNoHolderDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4, spares: 1, ft: true})
		j.checkpoint(1)
		j.kill(2) // rank 2's only holder is rank 3
		holder := j.ranks[3].rt
		var fired atomic.Bool
		j.nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			if from == 4 && to == holder.Proc() && h.Type == transport.FrameReadReq && fired.CompareAndSwap(false, true) {
				seg, err := holder.Segment(segments.ID(h.Seg))
				if err == nil {
					for i, b := range seg.Bytes() {
						seg.Bytes()[i] = ^b
					}
				}
			}
			return mem.Deliver
		})
		errs := j.restoreErrs([]int{2})
		j.nw.BeforeFrame(nil)
		if !fired.Load() {
			t.Fatal("the spare never read from its holder")
		}
		for r, err := range errs {
			if !errors.Is(err, ErrRestoreFailed) {
				t.Fatalf("rank %d: Restore = %v, want ErrRestoreFailed", r, err)
			}
		}
		if want := "holder 3"; !strings.Contains(errs[2].Error(), want) {
			t.Fatalf("spare: Restore = %v, want it to name %s", errs[2], want)
		}
		if err := j.ranks[0].ck.Start(j.ctx, 2); !errors.Is(err, ErrNeedsRestore) {
			t.Fatalf("Start after the failed restore = %v, want ErrNeedsRestore", err)
		}
	})
}

// restoreErrs runs a restore after the ranks killed were killed: each
// survivor recovers and restores, and one promoted spare per killed rank
// sets up and restores. It returns each rank's Restore error.
func (j *testJob) restoreErrs(killed []int) []error {
	j.t.Helper()
	ctx := j.ctx
	errs := make([]error, len(j.ranks))
	var wg sync.WaitGroup
	for range killed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := <-j.promoted
			m, err := j.newMember(ctx, rt)
			if err == nil {
				_, err = m.ck.Restore(ctx)
			}
			errs[rt.Rank()] = err
		}()
	}
	var survivors []int
	for r := range j.ranks {
		if !slices.Contains(killed, r) {
			survivors = append(survivors, r)
		}
	}
	j.each(survivors, func(r int) error {
		rt := j.ranks[r].rt
		if err := rt.Recover(ctx); err != nil {
			return err
		}
		if _, err := rt.SegmentCreate(ctx, appSeg, 4096, nil); err != nil {
			return err
		}
		_, errs[r] = j.ranks[r].ck.Restore(ctx)
		return nil
	})
	wg.Wait()
	return errs
}
