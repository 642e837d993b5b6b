package kmeans

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/ckpt"
)

// The checkpoint steps of the iteration loop: take one, vote on its
// commit with the next iteration's allreduce, commit it.

// checkpoint snapshots the state after iteration j.iter as checkpoint
// j.iter+1 (id 1 is the starting state); its commit follows the next step.
func (j *Job) checkpoint(ctx context.Context) error {
	j.setHeader(false)
	id := j.nextID()
	t0 := time.Now()
	defer func() { j.ckptTime += time.Since(t0) }()
	if err := j.ck.Start(ctx, id); err != nil {
		return err
	}
	j.pending = id
	return nil
}

// vote is the first half of the commit of the pending checkpoint when the
// iteration's reduction carries its agreement (ckpt Vote): this rank's
// vote for the reduction to sum, 0 when its push completed, 1 when not.
func (j *Job) vote(ctx context.Context) (float64, error) {
	if err := j.inject(ctx, "commit", j.fresh, j.fresh); err != nil {
		return 0, err
	}
	t0 := time.Now()
	ok, err := j.ck.Vote(ctx, j.pending)
	j.ckptTime += time.Since(t0)
	if err != nil || ok {
		return 0, err
	}
	return 1, nil
}

// agreed ends the commit that vote began: votes is the reduction's sum of
// the votes, rerr its error. It returns what commit would.
func (j *Job) agreed(votes float64, rerr error) error {
	id := j.pending
	j.pending, j.fresh = 0, false
	err := j.ck.Agreed(id, votes == 0, rerr)
	return j.committed(id, err)
}

func (j *Job) commit(ctx context.Context) error {
	// The checkpoint of iteration j.iter is being committed; the high-water
	// mark already counts that iteration, so whether this is the first time
	// was decided when the checkpoint started.
	if err := j.inject(ctx, "commit", j.fresh, j.fresh); err != nil {
		return err
	}
	id := j.pending
	j.pending, j.fresh = 0, false
	t0 := time.Now()
	err := j.ck.Commit(ctx, id)
	j.ckptTime += time.Since(t0)
	return j.committed(id, err)
}

// committed takes the outcome of the commit of checkpoint id.
func (j *Job) committed(id uint64, err error) error {
	if err == nil {
		j.commits++
		j.event("checkpoint", strconv.Itoa(j.iter))
	}
	if errors.Is(err, ckpt.ErrNotCommitted) {
		j.printf("checkpoint %d not committed (%v); the previous one stays in force\n", id, err)
		return nil
	}
	return err
}
