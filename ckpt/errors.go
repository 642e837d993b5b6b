package ckpt

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped by Config.Validate (and so by the constructors
	// that validate their Config) for an invalid configuration; the
	// message names the field and the values involved.
	ErrConfig = errors.New("ckpt: config")
	// ErrInvalid is returned for arguments that can never be right: an
	// empty or duplicate region name, a negative range, a segment region
	// that does not exist at Start. Returned by Register, RegisterSegment,
	// Start and New.
	ErrInvalid = errors.New("ckpt: invalid argument")
	// ErrTooLarge is returned by Register and RegisterSegment when the
	// registered regions would exceed Config.MaxBytes or MaxRegions.
	ErrTooLarge = errors.New("ckpt: snapshot too large")
	// ErrBadID is returned by Start for an id not above the last one
	// started (ids must increase, so that one id names one snapshot), and
	// by Commit for an id that Start did not begin.
	ErrBadID = errors.New("ckpt: bad checkpoint id")
	// ErrNotCommitted is returned by Commit when the agreement ran but some
	// rank's mirrors do not hold the checkpoint (its push failed). The last
	// committed checkpoint is unchanged on every rank.
	ErrNotCommitted = errors.New("ckpt: checkpoint not committed")
	// ErrNeedsRestore is returned by Start and Commit when the outcome of
	// an earlier Commit is unknown (its agreement failed half-way), and on
	// a promoted spare before its first Restore or LoadFromDisk. Call
	// Restore (after pgas Recover when a rank failed).
	ErrNeedsRestore = errors.New("ckpt: restore needed")
	// ErrNoCheckpoint is returned by Restore when no checkpoint is held,
	// for every rank, by the survivors or the mirrors (nothing was
	// committed yet, or more failures than the mirrors cover: use the disk
	// level), and by LoadFromDisk when no complete checkpoint on disk is
	// readable by every rank.
	ErrNoCheckpoint = errors.New("ckpt: no restorable checkpoint")
	// ErrRestoreFailed is returned by Restore and LoadFromDisk on every
	// rank when some rank could not restore the agreed checkpoint (its
	// copy failed verification, or its regions do not match the snapshot).
	ErrRestoreFailed = errors.New("ckpt: restore failed")
	// ErrCorrupt is wrapped by *HeaderError (DecodeHeader) and by
	// *FileError for damaged snapshots: bad magic, bad checksums, lengths
	// that do not add up, truncated files.
	ErrCorrupt = errors.New("ckpt: corrupt snapshot")
	// ErrLayout is returned when a snapshot's regions (count, lengths or
	// names) differ from the regions registered now.
	ErrLayout = errors.New("ckpt: snapshot layout differs from registered regions")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("ckpt: closed")
	// ErrDiskLost is wrapped by *DiskError, returned by FlushDisk,
	// VerifyDisk and Close once a committed checkpoint could not be
	// written to the disk level (and by VerifyDisk on every rank when any
	// rank lost one). The in-memory checkpoints are unaffected.
	ErrDiskLost = errors.New("ckpt: a disk checkpoint was lost")
)

// DiskError says which disk checkpoints a rank could not write, and why
// (the first cause). It wraps ErrDiskLost and the cause.
type DiskError struct {
	Rank int
	Lost uint64   // writes and manifests that failed
	IDs  []uint64 // the checkpoint ids (the first few)
	Dir  string
	Err  error
}

func (e *DiskError) Error() string {
	return fmt.Sprintf("ckpt: rank %d could not write %d disk checkpoint(s) %v to %s: %v; the disk level is missing them (check free space, permissions and the descriptor limit, ulimit -n)",
		e.Rank, e.Lost, e.IDs, e.Dir, e.Err)
}

func (e *DiskError) Unwrap() []error { return []error{ErrDiskLost, e.Err} }

// HeaderError says why DecodeHeader refused a header: the byte offset and
// field at fault. It wraps ErrCorrupt.
type HeaderError struct {
	Offset int
	Field  string
	Reason string
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("ckpt: header: %s at offset %d: %s", e.Field, e.Offset, e.Reason)
}

func (e *HeaderError) Unwrap() error { return ErrCorrupt }

// FileError names the file and byte offset of a damaged or unreadable disk
// checkpoint. Err wraps ErrCorrupt for damage, or the I/O error.
type FileError struct {
	Path   string
	Offset int64
	Err    error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("ckpt: %s at offset %d: %v", e.Path, e.Offset, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }
