package spares

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrSparesExhausted: a rank was lost with no spare left and shrinking
	// off; the job status is Failed with reason ReasonSparesExhausted.
	// Returned by WaitEpoch, WaitPromotion and Await once that state is
	// committed.
	ErrSparesExhausted = errors.New("spares: spare pool exhausted, job failed")
	// ErrJobFailed: the job status is Failed for a reason other than an
	// empty spare pool (see State.StatusReason). Returned by WaitEpoch,
	// WaitPromotion and Await.
	ErrJobFailed = errors.New("spares: job failed")
	// ErrJobFinished: the job finished before the awaited condition held.
	// Returned by WaitEpoch (epoch not reached) and WaitPromotion (this
	// process never got a rank).
	ErrJobFinished = errors.New("spares: job finished")
	// ErrDeclaredFailed: this process was declared failed in the committed
	// view; it is fenced and must exit (ExitDeclaredFailed). Returned by
	// WaitPromotion.
	ErrDeclaredFailed = errors.New("spares: this process was declared failed")
	// ErrCutOff: this process had no contact with a membership quorum for
	// longer than Config.CutOff and gave up (wrapped in *CutOffError, which
	// says for how long and from whom). Returned by Node.LostErr, and by
	// WaitEpoch, WaitPromotion and Await from then on. Exit with
	// ExitCutOff.
	ErrCutOff = errors.New("spares: cut off from the membership")
	// ErrClosed: the Node was shut down. Returned by every blocking Node
	// call after (or during) Shutdown.
	ErrClosed = errors.New("spares: node closed")
	// ErrTimeout: the context ended before the call completed. It is
	// retryable and never means that a process died. Returned (wrapped,
	// together with the context's error) by Propose, ReportFailure,
	// WaitEpoch, WaitPromotion and Await.
	ErrTimeout = errors.New("spares: timeout")
	// ErrNotLeader: the control RPC reached a process that is not the Raft
	// leader. Propose retries it and never returns it except as the Last
	// error inside a *ProposeError.
	ErrNotLeader = errors.New("spares: not the raft leader")
	// ErrNoLeader: no leader is known at the moment. Like ErrNotLeader it
	// is retried by Propose and only seen inside a *ProposeError.
	ErrNoLeader = errors.New("spares: no raft leader known")
	// ErrBadCommand: a command is malformed (decoding failed, a field is
	// out of range) or contradicts the state it is applied to. Returned by
	// decodeCommand, State.apply and Propose (not retried).
	ErrBadCommand = errors.New("spares: bad command")
	// ErrUnknownProc: a command names a process that is not in the job.
	// Returned by State.apply and Propose (not retried).
	ErrUnknownProc = errors.New("spares: unknown process")
	// ErrBadSnapshot: a snapshot or encoded state could not be decoded.
	// Returned by decodeState and by the FSM's Restore.
	ErrBadSnapshot = errors.New("spares: bad snapshot")
	// ErrConfig: a Config is invalid. Returned by Config.Validate and
	// NewNode; the message names the field and value.
	ErrConfig = errors.New("spares: invalid config")
	// ErrProtocol: a control-RPC peer sent a frame that is too large or
	// cannot be decoded. Returned inside a *ProposeError's Last.
	ErrProtocol = errors.New("spares: control protocol error")
)

// ProposeError is returned by Propose and ReportFailure when the command
// could not be committed before the context ended (Err is ErrTimeout) or
// the node closed (Err is ErrClosed). Last is the error of the last attempt
// (for example ErrNotLeader while an election was under way), Cause the
// context's error if any. errors.Is sees Err and Cause.
type ProposeError struct {
	Op       string // command kind, e.g. "DeclareFailed"
	Attempts int    // attempts made, at least 1
	Last     error  // error of the last attempt, may be nil
	Cause    error  // ctx.Err() when the context ended, else nil
	Err      error  // ErrTimeout or ErrClosed
}

func (e *ProposeError) Error() string {
	msg := fmt.Sprintf("spares: propose %s: %v after %d attempt(s)", e.Op, e.Err, e.Attempts)
	if e.Last != nil {
		msg += fmt.Sprintf(" (last: %v)", e.Last)
	}
	return msg
}

// Unwrap returns Err and Cause.
func (e *ProposeError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// CutOffError says that a process gave up because it had no contact with
// a membership quorum for too long. It wraps ErrCutOff.
type CutOffError struct {
	Proc        uint32        // this process
	Silent      time.Duration // time without contact (awake time only)
	Bound       time.Duration // Config.CutOff
	LastContact time.Time     // last message from a leader; zero: never
	Leader      uint32        // the leader it last knew, NoProc if none
	Voters      []uint32      // the voters as this process last knew them
}

func (e *CutOffError) Error() string {
	last := "never heard from a leader"
	if !e.LastContact.IsZero() {
		last = fmt.Sprintf("last heard from a leader at %s", e.LastContact.Format("15:04:05.000"))
		if e.Leader != NoProc {
			last += fmt.Sprintf(" (proc %d)", e.Leader)
		}
	}
	return fmt.Sprintf("spares: process %d cut off from the membership: no contact with a quorum of the Raft voters (procs %v) for %v, beyond the bound of %v (PGAS_CUTOFF); %s; no process it could reach said it was replaced; giving up",
		e.Proc, e.Voters, e.Silent.Round(time.Millisecond), e.Bound, last)
}

// Unwrap returns ErrCutOff.
func (e *CutOffError) Unwrap() error { return ErrCutOff }

// errorCode names the sentinels that cross the control RPC, so the caller
// gets the same errors.Is behaviour as a local call.
var errorCodes = []struct {
	code string
	err  error
}{
	{"bad-command", ErrBadCommand},
	{"unknown-proc", ErrUnknownProc},
	{"not-leader", ErrNotLeader},
	{"no-leader", ErrNoLeader},
	{"closed", ErrClosed},
	{"timeout", ErrTimeout},
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
