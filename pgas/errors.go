package pgas

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped by Config.Validate (and so by the constructors
	// that validate their Config) for an invalid configuration; the
	// message names the field and the values involved.
	ErrConfig = errors.New("pgas: config")
	// ErrTimeout is returned by every blocking call whose context ended
	// before the operation completed. It says nothing about the health of
	// any peer. Wait, reads and atomics may be retried; a collective may
	// not: its group is out of step afterwards (peers may have finished
	// it), and later collectives on that group return ErrInvalid. The
	// error also wraps the context's own error.
	ErrTimeout = errors.New("pgas: timeout")
	// ErrRankFailed is wrapped by *RankError when an operation could not
	// complete because the rank it depends on failed (its connection was
	// lost, or the membership declared it failed).
	ErrRankFailed = errors.New("pgas: rank failed")
	// ErrFenced is returned once this process learns that it was replaced
	// in a newer epoch: it must stop and exit.
	ErrFenced = errors.New("pgas: process fenced by a newer epoch")
	// ErrQueueFull is returned by Write, Read, Notify and WriteNotify when
	// the queue already holds QueueDepth operations since its last Wait.
	ErrQueueFull = errors.New("pgas: queue full")
	// ErrBounds is returned when a range lies outside a local or remote
	// segment. Nothing is written.
	ErrBounds = errors.New("pgas: range outside segment")
	// ErrNoSegment is returned for a segment ID that does not exist on the
	// rank addressed.
	ErrNoSegment = errors.New("pgas: no such segment")
	// ErrSegmentExists is returned by SegmentCreate for an ID in use.
	ErrSegmentExists = errors.New("pgas: segment already exists")
	// ErrInvalid is returned for arguments that can never be right: a rank
	// outside 0..Size-1, a queue outside 0..NumQueues-1, a misaligned atomic
	// offset, mismatched buffer sizes.
	ErrInvalid = errors.New("pgas: invalid argument")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("pgas: runtime closed")
	// ErrNotMember is returned by collectives called on a group that does
	// not contain this rank.
	ErrNotMember = errors.New("pgas: rank not in group")
	// ErrRemote wraps an error reported by the target of a one-sided
	// operation (for example a bounds error detected there).
	ErrRemote = errors.New("pgas: remote error")
	// ErrVacant is returned for an operation addressed to a vacant rank:
	// one lost in a job that shrinks, which no process holds any more
	// (Runtime.Vacant). It does not call for recovery: leave the rank out
	// (GroupAll already does) and hand its work to a live one.
	ErrVacant = errors.New("pgas: rank is vacant (the job shrank)")
	// ErrNotPromoted is returned by Init for a spare process when the job
	// ends without promoting it.
	ErrNotPromoted = errors.New("pgas: spare not promoted")
	// ErrFinished is returned by Recover once the membership has recorded
	// that the job finished: every rank had reached Finalize, so nothing is
	// left to recover and no newer view will come. The program ends.
	ErrFinished = errors.New("pgas: the job finished")
)

// RankError says that operation Op could not complete because of rank
// Rank. Err is ErrRankFailed, or an error wrapping it.
type RankError struct {
	Rank int
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	return fmt.Sprintf("pgas: %s: rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// ctxError turns a finished context into the error a blocking call returns.
func ctxError(ctx context.Context, op string) error {
	return fmt.Errorf("pgas: %s: %w (%w)", op, ErrTimeout, ctx.Err())
}

var errBusy = errors.New("pgas: target busy")

// wire error codes carried in FrameAck.A and FrameReadResp.A.
const (
	codeOK uint64 = iota
	codeNoSegment
	codeBounds
	codeInvalid
	codeFenced
	codeBusy
	codeStale
)

func codeOf(err error) uint64 {
	switch {
	case err == nil:
		return codeOK
	case errors.Is(err, ErrNoSegment):
		return codeNoSegment
	case errors.Is(err, ErrBounds):
		return codeBounds
	case errors.Is(err, ErrFenced):
		return codeFenced
	case errors.Is(err, errBusy):
		return codeBusy
	case errors.Is(err, ErrStaleEpoch):
		return codeStale
	}
	return codeInvalid
}

func errOf(code uint64) error {
	switch code {
	case codeOK:
		return nil
	case codeNoSegment:
		return ErrNoSegment
	case codeBounds:
		return ErrBounds
	case codeFenced:
		return ErrFenced
	case codeBusy:
		return errBusy
	case codeStale:
		return ErrStaleEpoch
	}
	return ErrInvalid
}
