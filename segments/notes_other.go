//go:build !linux

package segments

import "sync/atomic"

// Shared notification areas are Linux only (memfd); elsewhere
// Options.ShareNotifications makes New fail.

type noteArea struct{}

func newNoteArea(int) (*noteArea, error) { return nil, errNoMemfd }

func (*noteArea) renew() error              { return errNoMemfd }
func (*noteArea) dup() (int, error)         { return -1, errNoMemfd }
func (*noteArea) free()                     {}
func (*noteArea) sleepers() *atomic.Int32   { return nil }
func (*noteArea) slots(int) []atomic.Uint32 { return nil }

// PeerNotes is Linux only.
type PeerNotes struct{}

// MapNotes fails off Linux.
func MapNotes(int, int) (*PeerNotes, error) { return nil, errNoMemfd }

// Len returns 0 off Linux.
func (*PeerNotes) Len() int { return 0 }

// Set fails off Linux.
func (*PeerNotes) Set(NotificationID, uint32) (bool, error) { return false, errNoMemfd }

// Store does nothing off Linux.
func (*PeerNotes) Store(NotificationID, uint32) bool { return false }

// Fence reports false off Linux.
func (*PeerNotes) Fence() bool { return false }

// Unmap does nothing off Linux.
func (*PeerNotes) Unmap() {}
