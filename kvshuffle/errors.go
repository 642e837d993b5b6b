package kvshuffle

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped (through *ConfigError) by Config.Validate
	// and New when a setting, or a relation between settings, is wrong.
	ErrConfig = errors.New("kvshuffle: invalid config")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("kvshuffle: shuffle closed")
	// ErrSendClosed is returned by Send after CloseSend.
	ErrSendClosed = errors.New("kvshuffle: send side closed")
	// ErrNotOperator is returned by Send, CloseSend and MarkConsumed on a
	// rank that is not in the O communicator (Config.ORanks).
	ErrNotOperator = errors.New("kvshuffle: rank is not an O (operation) task")
	// ErrNotAggregator is returned by Recv and Groups (through Err) on a
	// rank that is not in the A communicator (Config.ARanks).
	ErrNotAggregator = errors.New("kvshuffle: rank is not an A (aggregation) task")
	// ErrTooLarge is returned by Send for a pair whose framed size is above
	// Config.MaxPairSize.
	ErrTooLarge = errors.New("kvshuffle: pair too large")
	// ErrPartition is returned by Send when Config.Partition returns a
	// value outside 0..parts-1.
	ErrPartition = errors.New("kvshuffle: partition out of range")
	// ErrCorrupt is wrapped (through *CorruptError) by DecodePair,
	// DecodeRun and RollBack (a damaged state) for bytes that are not what they
	// claim to be, and by Recv and Err when a frame from a peer or a spill
	// file fails its checks. Nothing is read or written out of bounds.
	ErrCorrupt = errors.New("kvshuffle: corrupt data")
	// ErrBudget is returned (through Err, Send, Checkpoint) when received
	// data exceeds Config.MemoryBudget and no Config.SpillDir is set.
	ErrBudget = errors.New("kvshuffle: memory budget exceeded and spilling is off")
	// ErrState is returned by a call made in the wrong phase: Recv or
	// Groups a second time, Checkpoint after Recv started, a checkpoint ID
	// that does not increase, MarkConsumed going backwards.
	ErrState = errors.New("kvshuffle: call not allowed in this phase")
	// ErrAborted is wrapped (through *AbortError) by every call of a
	// shuffle whose peer failed and told it so: the shuffle cannot finish
	// and must be rolled back or closed.
	ErrAborted = errors.New("kvshuffle: aborted by another rank")
	// ErrMismatch is returned by RollBack when the state is for another
	// rank or job shape, or when ranks roll back to different checkpoints.
	// ErrLost is returned by RollBack when a spill file its state names
	// is unreadable where the rank runs now and no rank holds a copy, and
	// by Checkpoint when a holder could not keep the copies.
	ErrLost     = errors.New("kvshuffle: checkpoint spill file lost")
	ErrMismatch = errors.New("kvshuffle: checkpoint state does not match")
)

// ConfigError names the setting that failed validation, its value and what
// is wrong with it. It unwraps to ErrConfig.
type ConfigError struct {
	Field  string // the setting, as spelled in Config
	Value  string // its value, formatted
	Reason string // what is wrong and what to do instead
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s = %s: %s", ErrConfig, e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// CorruptError says which structure failed to decode, at which byte
// offset, and why. It unwraps to ErrCorrupt.
type CorruptError struct {
	What   string // "pair", "run", "frame from rank 3", "spill file /x", "state"
	Offset int64  // byte offset of the problem within What
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d: %s", ErrCorrupt, e.What, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corrupt(what string, off int64, format string, args ...any) error {
	return &CorruptError{What: what, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// AbortError says which rank's shuffle failed and aborted this one. It
// unwraps to ErrAborted.
type AbortError struct {
	Rank int
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("%v: the shuffle on rank %d failed; see its log", ErrAborted, e.Rank)
}

// Unwrap returns ErrAborted.
func (e *AbortError) Unwrap() error { return ErrAborted }
