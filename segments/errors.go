package segments

import (
	"errors"
	"fmt"
)

var (
	// ErrBounds is returned by CopyIn, CopyOut, Slice and the typed views when
	// the range does not lie inside the segment.
	ErrBounds = errors.New("segments: range outside segment")
	// ErrAlign is returned by the typed views and Word when the offset is not
	// aligned to the element size.
	ErrAlign = errors.New("segments: misaligned offset")
	// ErrNotificationID is returned for a notification slot ID outside
	// 0..NumNotifications-1.
	ErrNotificationID = errors.New("segments: notification id out of range")
	// ErrSize is returned by New for a size that is zero, negative or above
	// MaxSize.
	ErrSize = errors.New("segments: invalid size")
	// ErrClosed is returned by WaitSome once the segment is closed.
	ErrClosed = errors.New("segments: closed")
	// ErrDropped is returned by WaitSome when a slot it waits on was set
	// while it waited and the segment's epoch moved on before the waiter
	// saw it (SetEpoch): the value no longer counts, and what was to
	// follow it must be set again in the new epoch.
	ErrDropped = errors.New("segments: a notification set during the wait belongs to an older epoch")
	// ErrNotShared is returned by DupNotes for a segment whose slots are
	// not in shared memory (Options.ShareNotifications).
	ErrNotShared = errors.New("segments: notification slots not shared")
)

// RangeError says which access fell outside a segment. It wraps ErrBounds.
type RangeError struct {
	ID       ID
	Off, Len int64
	Size     int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("segments: segment %d: range [%d, %d) outside [0, %d)", e.ID, e.Off, e.Off+e.Len, e.Size)
}

func (e *RangeError) Unwrap() error { return ErrBounds }
