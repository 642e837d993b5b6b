package recovery

import (
	"context"
	"errors"

	"github.com/gaspigo/gaspigo/pgas"
)

// FinalizeError is a failure of Finalize itself that no recovery settles
// (pgas.NeedsRecovery does not hold for Err): the rank's work was done
// and agreed before, so callers may report it and go on.
type FinalizeError struct{ Err error }

func (e *FinalizeError) Error() string { return e.Err.Error() }
func (e *FinalizeError) Unwrap() error { return e.Err }

// Finalizer is what Finalize needs of a *pgas.Runtime.
type Finalizer interface {
	Finalize(ctx context.Context) error
}

// Finalize ends the job for this rank: rt.Finalize, and when a rank or
// spare was lost meanwhile, recover(ctx, cause), which rolls the rank
// back (a Loop's Rejoin as a rule) and redoes the work the restored
// checkpoint lacks (nothing when it is the job's final one); then the
// ranks finalize again. It returns nil, a *FinalizeError, or recover's
// error. A recovery that finds the job finished meanwhile
// (pgas.ErrFinished: every rank had reached Finalize and the membership
// recorded the end) ends it like a successful Finalize: nil.
func Finalize(ctx context.Context, rt Finalizer, recover func(ctx context.Context, cause error) error) error {
	for {
		err := rt.Finalize(ctx)
		if err == nil {
			return nil
		}
		if !pgas.NeedsRecovery(err) {
			return &FinalizeError{Err: err}
		}
		if err := recover(ctx, err); errors.Is(err, pgas.ErrFinished) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// Finalize is Finalize with the Loop's Rejoin, then resume.
func (l *Loop) Finalize(ctx context.Context, resume func(ctx context.Context) error) error {
	return Finalize(ctx, l.RT, func(ctx context.Context, cause error) error {
		if err := l.Rejoin(ctx, cause); err != nil {
			return err
		}
		return resume(ctx)
	})
}
