package spares

import (
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/wire"
)

// The errors a job sees: the membership's views (Membership.Current and
// Watch, pgas.View.Err) and its verdict on this process
// (Membership.LostErr) carry them, and job.ExitCode maps each to its
// exit code.
var (
	// ErrSparesExhausted: a rank was lost with no spare left and shrinking
	// off; the job status is statusFailed with reason
	// reasonSparesExhausted. A view of that state carries it, and so do
	// the node's waits once the state is committed (exit code
	// job.ExitSparesExhausted).
	ErrSparesExhausted = errors.New("spares: spare pool exhausted, job failed")
	// ErrJobFailed: the job status is statusFailed for a reason other
	// than an empty spare pool (see state.StatusReason), carried like
	// ErrSparesExhausted (exit code job.ExitJobFailed).
	ErrJobFailed = errors.New("spares: job failed")
	// ErrDeclaredFailed: this process was declared failed in the committed
	// view; it is fenced and must exit (job.ExitDeclaredFailed). Returned
	// by waitPromotion, and by Membership.LostErr when another process
	// told this one so while it was out of contact.
	ErrDeclaredFailed = errors.New("spares: this process was declared failed")
	// ErrCutOff: this process had no contact with a membership quorum for
	// longer than Config.CutOff and gave up (wrapped in *cutOffError, which
	// says for how long and from whom). Returned by Membership.LostErr,
	// and by the node's waits from then on (exit code job.ExitCutOff).
	ErrCutOff = errors.New("spares: cut off from the membership")
)

// The errors that stay inside the package, or reach a caller only
// wrapped in one of the above or in a message.
var (
	// errJobFinished: the job finished before the awaited condition held.
	// Returned by waitEpoch (epoch not reached) and waitPromotion (this
	// process never got a rank).
	errJobFinished = errors.New("spares: job finished")
	// errClosed: the Node was shut down. Returned by every blocking Node
	// call after (or during) Shutdown.
	errClosed = errors.New("spares: node closed")
	// errTimeout: the context ended before the call completed. It is
	// retryable and never means that a process died. Returned (wrapped,
	// together with the context's error) by propose, reportFailure,
	// waitEpoch, waitPromotion and awaitState.
	errTimeout = errors.New("spares: timeout")
	// errNotLeader: the control RPC reached a process that is not the Raft
	// leader. propose retries it and never returns it except as the Last
	// error inside a *proposeError.
	errNotLeader = errors.New("spares: not the raft leader")
	// errNoLeader: no leader is known at the moment. Like errNotLeader it
	// is retried by propose and only seen inside a *proposeError.
	errNoLeader = errors.New("spares: no raft leader known")
	// errBadCommand: a command is malformed (decoding failed, a field is
	// out of range) or contradicts the state it is applied to. Returned by
	// decodeCommand, state.apply and propose (not retried).
	errBadCommand = errors.New("spares: bad command")
	// errUnknownProc: a command names a process that is not in the job.
	// Returned by state.apply and propose (not retried).
	errUnknownProc = errors.New("spares: unknown process")
	// errBadSnapshot: a snapshot or encoded state could not be decoded.
	// Returned by decodeState and by the FSM's Restore.
	errBadSnapshot = errors.New("spares: bad snapshot")
	// errConfig: a Config is invalid. Returned by Config.validate and
	// NewNode; the message names the field and value.
	errConfig = errors.New("spares: invalid config")
	// errProtocol: a control-RPC peer sent a frame that is too large or
	// cannot be decoded. Returned inside a *proposeError's Last.
	errProtocol = wire.ErrProtocol
)

// proposeError is returned by propose and reportFailure when the command
// could not be committed before the context ended (Err is errTimeout) or
// the node closed (Err is errClosed). Last is the error of the last attempt
// (for example errNotLeader while an election was under way), Cause the
// context's error if any. errors.Is sees Err and Cause.
type proposeError struct {
	Op       string // command kind, e.g. "DeclareFailed"
	Attempts int    // attempts made, at least 1
	Last     error  // error of the last attempt, may be nil
	Cause    error  // ctx.Err() when the context ended, else nil
	Err      error  // errTimeout or errClosed
}

func (e *proposeError) Error() string {
	msg := fmt.Sprintf("spares: propose %s: %v after %d attempt(s)", e.Op, e.Err, e.Attempts)
	if e.Last != nil {
		msg += fmt.Sprintf(" (last: %v)", e.Last)
	}
	return msg
}

// Unwrap returns Err and Cause.
func (e *proposeError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// cutOffError says that a process gave up because it had no contact with
// a membership quorum for too long. It wraps ErrCutOff.
type cutOffError struct {
	Proc        uint32        // this process
	Silent      time.Duration // time without contact (awake time only)
	Bound       time.Duration // Config.CutOff
	LastContact time.Time     // last message from a leader; zero: never
	Leader      uint32        // the leader it last knew, noProc if none
	Voters      []uint32      // the voters as this process last knew them
}

func (e *cutOffError) Error() string {
	last := "never heard from a leader"
	if !e.LastContact.IsZero() {
		last = fmt.Sprintf("last heard from a leader at %s", e.LastContact.Format("15:04:05.000"))
		if e.Leader != noProc {
			last += fmt.Sprintf(" (proc %d)", e.Leader)
		}
	}
	return fmt.Sprintf("spares: process %d cut off from the membership: no contact with a quorum of the Raft voters (procs %v) for %v, beyond the bound of %v (PGAS_CUTOFF); %s; no process it could reach said it was replaced; giving up",
		e.Proc, e.Voters, e.Silent.Round(time.Millisecond), e.Bound, last)
}

// Unwrap returns ErrCutOff.
func (e *cutOffError) Unwrap() error { return ErrCutOff }

// errorCode names the sentinels that cross the control RPC, so the caller
// gets the same errors.Is behaviour as a local call.
var errorCodes = []struct {
	code string
	err  error
}{
	{"bad-command", errBadCommand},
	{"unknown-proc", errUnknownProc},
	{"not-leader", errNotLeader},
	{"no-leader", errNoLeader},
	{"closed", errClosed},
	{"timeout", errTimeout},
}

func codeOf(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "internal"
}

func errOfCode(code string) error {
	for _, c := range errorCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}
