//go:build !linux

package segments

import "sync/atomic"

// Shared notification areas are Linux only (memfd); elsewhere
// Options.ShareNotifications makes New fail.

// MaxWriters is how many processes can be given one segment's
// notification area (Linux only).
const MaxWriters = 4096

type noteArea struct{}

func newNoteArea(int) (*noteArea, error) { return nil, errNoMemfd }

func (*noteArea) dup() (int, error)       { return -1, errNoMemfd }
func (*noteArea) free()                   {}
func (*noteArea) epoch() *atomic.Uint32   { return nil }
func (*noteArea) sleepers() *atomic.Int32 { return nil }
func (*noteArea) slots() []atomic.Uint64  { return nil }
func (*noteArea) writerBusy(int) bool     { return false }

// PeerNotes is Linux only.
type PeerNotes struct{}

// MapNotes fails off Linux.
func MapNotes(int, int, int) (*PeerNotes, error) { return nil, errNoMemfd }

// Len returns 0 off Linux.
func (*PeerNotes) Len() int { return 0 }

// Set fails off Linux.
func (*PeerNotes) Set(NotificationID, uint32, uint32) (bool, bool, error) {
	return false, false, errNoMemfd
}

// Store does nothing off Linux.
func (*PeerNotes) Store(NotificationID, uint32, uint32) (bool, bool) { return false, false }

// Enter reports false off Linux.
func (*PeerNotes) Enter(uint32) bool { return false }

// Exit does nothing off Linux.
func (*PeerNotes) Exit() {}

// EnterQueue reports false off Linux.
func (*PeerNotes) EnterQueue(int, uint32) bool { return false }

// ExitQueue does nothing off Linux.
func (*PeerNotes) ExitQueue(int) {}

// PrepareWriter does nothing off Linux.
func PrepareWriter() {}

// SyncWriters does nothing off Linux.
func SyncWriters() error { return nil }

// Fence reports false off Linux.
func (*PeerNotes) Fence(uint32) bool { return false }

// Unmap does nothing off Linux.
func (*PeerNotes) Unmap() {}
