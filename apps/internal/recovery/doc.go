// Package recovery is the one recovery loop of the applications: after a
// failure, wait for the new membership (pgas Recover), restore the last
// committed checkpoint on every rank, and go on; a failure during the
// restore starts the recovery again. It joins package pgas (the new view)
// and the application's checkpoints (package ckpt), which know nothing of
// each other, so it lives above both.
//
// # Contract
//
// A Loop holds the runtime and the application's Restore, which is
// collective: every rank of the new view calls it (the survivors after
// Recover, a promoted spare at once) and it rolls the rank's state back to
// the last committed checkpoint. Restore returns an error for which Needed
// holds when another failure interrupted it; the Loop then recovers again,
// with Attempt.Retry set. Any other error (a fenced process's
// pgas.ErrFenced from Recover, no spare left, no checkpoint to restore)
// ends the loop and is returned as is: the caller turns it into an exit
// code. Rejoin returns nil once every rank restored, i.e. the work goes on
// from the restored state.
//
// The application's work loop around it:
//
//	l := &recovery.Loop{RT: rt, Restore: restore}
//	if rt.StartedAsSpare() {
//		err = l.Rejoin(ctx, nil) // join the survivors' recovery
//	}
//	for err == nil && !done {
//		err = step(ctx) // compute, exchange, checkpoint
//		if recovery.Needed(err) {
//			err = l.Rejoin(ctx, err) // nil: redo from the restored state
//		}
//	}
//	if err == nil {
//		// A rank lost while the ranks finalize: recover, redo what the
//		// restored checkpoint lacks (resume), finalize again.
//		err = l.Finalize(ctx, resume)
//	}
//
// Finalize (and Loop.Finalize, which recovers with Rejoin then resume)
// returns nil, the error of the recovery, or a *FinalizeError: a failure
// of Finalize itself that no recovery settles, after the rank's work was
// done and agreed, which a program may report and ignore. A recovery that
// finds the job finished meanwhile (pgas.ErrFinished) ends it with nil:
// every rank had reached Finalize, so nothing was left to redo. An
// application with its own way back (TeraSort starts over when no
// checkpoint was committed yet) passes its recovery to Finalize directly.
//
// Needed is the one test of "a recovery settles this": pgas.NeedsRecovery
// (a failure, an epoch change) or ckpt.ErrNeedsRestore (a checkpointer
// that cannot go on without a restore).
package recovery
