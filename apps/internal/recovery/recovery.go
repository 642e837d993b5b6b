package recovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/pgas"
)

// Runtime is what a recovery needs of a *pgas.Runtime.
type Runtime interface {
	// Recover waits for the view that replaces the failed processes.
	Recover(ctx context.Context) error
	// Finalize ends the job for this process, collectively.
	Finalize(ctx context.Context) error
}

// Attempt describes one attempt of a recovery to Restore and Report.
type Attempt struct {
	// Cause is the failure being recovered from; nil for a promoted spare
	// joining a recovery under way (no Recover is called then).
	Cause error
	// Retry: an earlier attempt of this recovery was interrupted by
	// another failure (Cause is that failure).
	Retry bool
	// Started is when the attempt began, before Recover.
	Started time.Time
	// View is how long Recover took: the wait for the new membership.
	// Zero in Report, which is called before Recover.
	View time.Duration
}

// Loop recovers one rank of a job. RT and Restore are required; Report
// is optional.
type Loop struct {
	RT Runtime
	// Restore rolls this rank back to the last committed checkpoint; it
	// is collective across the ranks of the new view (see the package
	// doc). An error for which Needed holds makes the Loop recover again.
	Restore func(ctx context.Context, a Attempt) error
	// Report, if set, is called before each Recover (not for a promoted
	// spare's first attempt), e.g. to print the cause.
	Report func(a Attempt)
}

// Needed reports whether err is settled by a recovery: a failure or an
// epoch change (pgas.NeedsRecovery), or a checkpointer that needs a
// restore (ckpt.ErrNeedsRestore).
func Needed(err error) bool {
	return pgas.NeedsRecovery(err) || errors.Is(err, ckpt.ErrNeedsRestore)
}

// Rejoin recovers from cause (nil for a promoted spare, which joins the
// survivors' recovery and restores at once) until Restore succeeds, and
// returns nil then. It returns the first error that a recovery does not
// settle: Recover's (pgas.ErrFenced for a process replaced meanwhile, the
// membership's error when no spare is left) or Restore's.
func (l *Loop) Rejoin(ctx context.Context, cause error) error {
	a := Attempt{Cause: cause}
	for {
		a.Started, a.View = time.Now(), 0
		if a.Cause != nil {
			if l.Report != nil {
				l.Report(a)
			}
			if err := l.RT.Recover(ctx); err != nil {
				return err
			}
			a.View = time.Since(a.Started)
			observeView(a)
		}
		t0 := time.Now()
		err := l.Restore(ctx, a)
		observeRestore(a, t0, err)
		if err == nil || !Needed(err) {
			return err
		}
		a.Cause, a.Retry = err, true
	}
}

// Printing returns the Loop of a program that reports in lines printed
// with printf, in words (Brief): before each Recover the cause ("recovery:
// rank 2 failed"; for a retry or a promoted spare joining, that the
// recovery was interrupted and starts again), and after a successful
// restore the new epoch, what restore says it rolled back to, and how
// long the recovery took. The cause's whole error chain goes to rt's
// logger at info level (gaspirun -v, PGAS_LOG=info). joining: this rank
// is a promoted spare, and every failure it sees interrupts a recovery
// under way.
func Printing(rt interface {
	Runtime
	Epoch() uint64
	Logger() *slog.Logger
}, joining bool, printf func(format string, args ...any), restore func(context.Context) (what string, err error)) *Loop {
	return &Loop{RT: rt,
		Report: func(a Attempt) {
			rt.Logger().Info("recovery: the cause", "retry", a.Retry || joining, "err", a.Cause)
			if a.Retry || joining {
				printf("recovery: interrupted by another failure (%s); recovering again\n", Brief(a.Cause))
			} else {
				printf("recovery: %s; every rank goes back to the last checkpoint\n", Brief(a.Cause))
			}
		},
		Restore: func(ctx context.Context, a Attempt) error {
			what, err := restore(ctx)
			if err == nil {
				printf("recovery: epoch %d in force after %v; %s after %v\n", rt.Epoch(), a.View.Round(time.Millisecond), what, time.Since(a.Started).Round(time.Millisecond))
			}
			return err
		}}
}
