package ckpt

// The commit of a checkpoint: waiting for its push, the vote and the
// agreement among the ranks (§7.3 of docs/design.md), and settling the
// outcome.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/pgas"
)

// Commit makes checkpoint id the last committed one, once every rank's
// mirrors hold it. It is collective: it waits for this rank's push to
// complete at its holders, then agrees with every rank (an allreduce).
// It returns ErrNotCommitted when some rank's push failed (wrapping a
// *pgas.RankError naming a failed holder, or pgas.ErrStaleEpoch when a
// holder refused it from a newer epoch, so pgas.NeedsRecovery tells the
// program to recover), and the pgas error (a *pgas.RankError, ErrTimeout,
// ErrStaleEpoch) when the agreement itself failed; then the outcome is
// unknown on this rank and Restore is required. A timeout while waiting
// for this rank's own push changes nothing: Commit may be called again.
func (c *Checkpointer) Commit(ctx context.Context, id uint64) error {
	defer phase("commit", id)()
	t0 := time.Now()
	j, rank, err := c.waitPush(ctx, id)
	if err != nil {
		return err
	}
	// [ok, lowest rank whose push failed, lowest holder found failed,
	// 0 if a push was refused because its holder is in a newer epoch]
	vals := []uint64{1, math.MaxUint64, math.MaxUint64, 1}
	if j.err != nil {
		vals[0], vals[1] = 0, uint64(rank)
		var re *pgas.RankError
		if errors.As(j.err, &re) {
			vals[2] = uint64(re.Rank)
		}
		if errors.Is(j.err, pgas.ErrStaleEpoch) {
			vals[3] = 0
		}
	}
	err = pgas.Allreduce(ctx, c.rt, nil, vals, pgas.OpMin)
	return c.settle(j, t0, vals, err)
}

// Vote is the first half of Commit, for a program that carries the
// agreement in a collective of its own and so saves Commit's allreduce:
// it waits for this rank's push of checkpoint id to complete at its
// holders and returns whether it succeeded. The program combines the
// votes of every rank (all must be true) in its next collective on
// pgas.GroupAll, which takes the place of Commit's, and passes the
// outcome to Agreed. Between the two it calls no other method of the
// Checkpointer. Its errors are Commit's before the agreement.
func (c *Checkpointer) Vote(ctx context.Context, id uint64) (bool, error) {
	t0 := time.Now()
	j, _, err := c.waitPush(ctx, id)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	c.voteStart = t0
	c.mu.Unlock()
	return j.err == nil, nil
}

// Agreed is the second half of Commit after Vote: allOK is the combined
// vote of every rank, err the error of the collective that combined them
// (nil if it completed). It returns what Commit would, except that a
// failed push elsewhere is not named.
func (c *Checkpointer) Agreed(id uint64, allOK bool, err error) error {
	c.mu.Lock()
	j, t0 := c.pending, c.voteStart
	c.mu.Unlock()
	if j == nil || j.id != id {
		return fmt.Errorf("ckpt: agreed %d: not voted since the last commit: %w", id, ErrBadID)
	}
	vals := []uint64{1, math.MaxUint64, math.MaxUint64, 1}
	if !allOK {
		vals[0] = 0
	}
	return c.settle(j, t0, vals, err)
}

// waitPush waits for the push of checkpoint id, the pending one.
func (c *Checkpointer) waitPush(ctx context.Context, id uint64) (*job, int, error) {
	c.mu.Lock()
	if err := c.usableLocked(); err != nil {
		c.mu.Unlock()
		return nil, 0, err
	}
	j := c.pending
	rank := c.rank
	c.mu.Unlock()
	if j == nil || j.id != id {
		return nil, 0, fmt.Errorf("ckpt: commit %d: not started since the last commit: %w", id, ErrBadID)
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("ckpt: commit %d: waiting for this rank's push: %w (%w)", id, pgas.ErrTimeout, ctx.Err())
	case <-c.ctx.Done():
		return nil, 0, ErrClosed
	}
	return j, rank, nil
}

// settle ends the commit of j's checkpoint with the agreement's outcome:
// vals as Commit's allreduce left them, err its error.
func (c *Checkpointer) settle(j *job, t0 time.Time, vals []uint64, err error) error {
	id := j.id
	c.mu.Lock()
	rank := c.rank
	c.st.CommitTime += time.Since(t0)
	c.st.LastCommit = time.Since(t0)
	if err != nil {
		c.needsRestore = true
		c.noteFailureLocked(err)
		c.mu.Unlock()
		return fmt.Errorf("ckpt: commit %d: agreement: %w", id, err)
	}
	c.pending = nil
	if vals[0] == 0 {
		c.st.Aborted++
		c.mu.Unlock()
		if j.err != nil {
			return fmt.Errorf("ckpt: commit %d: %w: %w", id, ErrNotCommitted, j.err)
		}
		if vals[1] == math.MaxUint64 {
			return fmt.Errorf("ckpt: commit %d: %w: another rank's push failed", id, ErrNotCommitted)
		}
		err := fmt.Errorf("ckpt: commit %d: %w: rank %d's push failed", id, ErrNotCommitted, vals[1])
		if vals[2] != math.MaxUint64 {
			err = fmt.Errorf("%w: %w", err, &pgas.RankError{Rank: int(vals[2]), Op: "ckpt push", Err: pgas.ErrRankFailed})
		}
		if vals[3] == 0 {
			// A membership change without a failure (a process joined the
			// pool): every rank, not only the refused one, must recover
			// into the new epoch.
			err = fmt.Errorf("%w: a holder had moved to a newer epoch: %w", err, pgas.ErrStaleEpoch)
		}
		return err
	}
	c.committed, c.lastCommit = j.buf, id
	c.st.Committed++
	obs.CheckpointsCommitted.Inc()
	if c.cfg.Dir != "" {
		c.enqueueDiskLocked(j.buf)
	}
	c.signalLocked()
	c.mu.Unlock()
	c.log.Debug("checkpoint committed", "rank", rank, "id", id, "commit", time.Since(t0))
	return nil
}
