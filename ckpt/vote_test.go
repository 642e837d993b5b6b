package ckpt

import (
	"errors"
	"testing"

	"github.com/gaspigo/gaspigo/pgas"
)

// Vote and Agreed commit a checkpoint with the agreement carried by the
// program's own collective: every rank votes, the program combines the
// votes, and the checkpoint is committed only if all were true; otherwise
// the previous one stays in force.
func TestVoteAgreed(t *testing.T) {
	j := newTestJob(t, jobOpts{ranks: 4})
	ctx := j.ctx
	j.checkpoint(1)
	commitWith := func(id uint64, veto int) []error {
		errs := make([]error, len(j.ranks))
		j.each(j.live(), func(r int) error {
			m := j.ranks[r]
			m.fill(r, id)
			if err := m.ck.Start(ctx, id); err != nil {
				return err
			}
			ok, err := m.ck.Vote(ctx, id)
			if err != nil {
				return err
			}
			// The program's collective, with the vote in it.
			v := []int64{0, int64(r)}
			if !ok || r == veto {
				v[0] = 1
			}
			err = pgas.Allreduce(ctx, m.rt, nil, v, pgas.OpSum)
			errs[r] = m.ck.Agreed(id, v[0] == 0, err)
			return nil
		})
		return errs
	}
	for r, err := range commitWith(2, -1) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if id, ok := j.ranks[r].ck.LastCommitted(); !ok || id != 2 {
			t.Fatalf("rank %d: last committed %d, want 2", r, id)
		}
	}
	// Rank 1 vetoes 3 (as if its push had failed): nobody commits it.
	for r, err := range commitWith(3, 1) {
		if !errors.Is(err, ErrNotCommitted) {
			t.Fatalf("rank %d: %v, want ErrNotCommitted", r, err)
		}
		if id, _ := j.ranks[r].ck.LastCommitted(); id != 2 {
			t.Fatalf("rank %d: last committed %d, want 2", r, id)
		}
	}
	// Every push of 3 completed, so a restore finds it on every rank.
	j.advance(4)
	j.each(j.live(), func(r int) error {
		id, err := j.ranks[r].ck.Restore(ctx)
		if err == nil && id != 3 {
			t.Errorf("rank %d restored %d, want 3", r, id)
		}
		return err
	})
	j.checkAll(3)
}
