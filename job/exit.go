package job

import (
	"errors"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
)

// Exit codes of a process whose job ended it. They are distinct from the
// generic 1 and from the shell's 126-165 range, so a launcher can tell
// them apart (gaspirun reports them by name). ExitCode gives them.
const (
	// ExitSparesExhausted is the exit status of every process when a rank
	// was lost, no spare was left and shrinking is off (EX_TEMPFAIL in
	// sysexits.h: the job may succeed when run again with more spares).
	ExitSparesExhausted = 75
	// ExitJobFailed is the exit status when the job failed for another
	// membership reason (all ranks lost while shrinking).
	ExitJobFailed = 76
	// ExitDeclaredFailed is the exit status of a process that finds itself
	// declared failed (a paused or partitioned process that was replaced):
	// it is fenced and must stop.
	ExitDeclaredFailed = 77
	// ExitNoRendezvous is the exit status of a process that got no member
	// table within PGAS_RENDEZVOUS_TIMEOUT (ErrRendezvousTimeout): nobody
	// served the rendezvous, or not every process registered; and of a
	// process started to join a running job that the job's membership did
	// not take in within the bound (ErrCannotJoin) (EX_UNAVAILABLE in
	// sysexits.h).
	ExitNoRendezvous = 69
	// ExitCutOff is the exit status of a process that had no contact with
	// a membership quorum for longer than the cut-off (PGAS_CUTOFF): it was
	// cut off from the others, who have replaced it if they could
	// (EX_IOERR in sysexits.h).
	ExitCutOff = 74
)

// ExitCode is the exit code for a fault-tolerant program's main, from the
// error that ended it: 0 for nil, for a spare that was never needed, and
// for a process that found the job finished while it recovered
// (pgas.ErrFinished: every rank had done its work); ExitSparesExhausted,
// ExitJobFailed, ExitDeclaredFailed (a fenced process), ExitCutOff or
// ExitNoRendezvous for those outcomes; 1 otherwise. It is the one mapping
// from a program's final error to its exit code.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, pgas.ErrNotPromoted) && !errors.Is(err, spares.ErrSparesExhausted),
		errors.Is(err, pgas.ErrFinished):
		return 0
	case errors.Is(err, pgas.ErrFenced), errors.Is(err, spares.ErrDeclaredFailed):
		return ExitDeclaredFailed
	case errors.Is(err, bootstrap.ErrRendezvousTimeout), errors.Is(err, ErrCannotJoin):
		return ExitNoRendezvous
	case errors.Is(err, spares.ErrCutOff):
		return ExitCutOff
	case errors.Is(err, spares.ErrSparesExhausted):
		return ExitSparesExhausted
	case errors.Is(err, spares.ErrJobFailed):
		return ExitJobFailed
	case errors.Is(err, ErrShrinkAborts):
		return ExitUsage
	}
	return 1
}

// ExitUsage is the exit status of a process whose settings contradict its
// launcher's (ErrShrinkAborts), as of a bad flag.
const ExitUsage = 2

// ErrShrinkAborts: the job shrinks when a rank is lost (a death is
// survived), but the launcher ends the job at the first death (gaspirun
// --on-death abort, PGAS_ON_DEATH=abort). Refused at start rather than
// promised and broken at the first death.
var ErrShrinkAborts = errors.New("pgas: init: this job goes on with fewer ranks when one is lost (it shrinks), but its launcher ends the job at the first death (gaspirun --on-death abort): drop --on-death abort, or do not shrink")

// shrinkContract refuses a job that shrinks under a launcher that aborts
// at the first death, and otherwise tells the launcher that this job
// survives deaths (bootstrap.KindShrink), so that one that would end it
// at the first death (gaspirun without spares) keeps it going.
func shrinkContract(env bootstrap.Env, mc spares.Config, sess *bootstrap.Session) error {
	if !mc.Shrink {
		return nil
	}
	if env.DeathAborts {
		return ErrShrinkAborts
	}
	sess.Report(bootstrap.Report{Proc: env.Proc, Kind: bootstrap.KindShrink, Rank: -1})
	return nil
}
