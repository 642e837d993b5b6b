package kmeans

import (
	"context"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
)

// The setup of a rank, before Run: NewJob (the data and the starting
// centroids), SetupCheckpoints (the checkpointer and the registration of
// the state), and the program's resume from disk, if any. Each
// collective step can meet the failure of another rank; such a failure is
// recovered like one in the loop: the rank records it (SetupFailed), skips
// the collective steps left (a checkpointer is still made, locally:
// Joining), and Run starts with a recovery, in which the promoted spare
// joins the setup (ckpt Restore creates the segments of every rank) and,
// with nothing committed yet, every rank starts over from the initial
// centroids.

// Joining reports whether this process joins a recovery when Run starts:
// it is a promoted spare, or a collective step of its setup failed. Its
// checkpointer must leave the collective setup to Restore
// (ckpt.NewJoining), and it skips the collective steps left.
func (j *Job) Joining() bool { return j.rt.StartedAsSpare() || j.setupErr != nil }

// SetupFailed takes the error of a collective setup step (NewJob's
// centroids, the checkpointer, a resume from disk): when a recovery
// settles it (recovery.Needed), the job records it, Run recovers from it
// first, and SetupFailed returns nil; any other error is returned as is.
func (j *Job) SetupFailed(err error) error {
	if err == nil || !recovery.Needed(err) {
		return err
	}
	if j.setupErr == nil {
		j.setupErr = err
	}
	return nil
}

// SetupCheckpoints makes the job's checkpointer with newCk and registers
// the state with it (UseCheckpoints). joining tells newCk to make it
// locally (ckpt.NewJoining; see Joining), else collectively (ckpt.New). A
// failure of another rank during newCk is recorded (SetupFailed): newCk
// returns the checkpointer with the error then, as ckpt.New does. The
// caller closes the checkpointer, also after an error.
func (j *Job) SetupCheckpoints(ctx context.Context, newCk func(ctx context.Context, joining bool) (Checkpoints, error)) error {
	if !j.rt.StartedAsSpare() {
		if err := j.inject(ctx, "ckpt-new", true, true); err != nil {
			return err
		}
	}
	ck, err := newCk(ctx, j.Joining())
	if ck == nil {
		return err
	}
	if err := j.SetupFailed(err); err != nil {
		return err
	}
	return j.UseCheckpoints(ck)
}
