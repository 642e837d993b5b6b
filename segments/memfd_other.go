//go:build !linux

package segments

import "errors"

// errNoMemfd: segments in shared memory need Linux (memfd).
var errNoMemfd = errors.New("segments: shared segments need Linux")

// MemfdBacking is Linux only; elsewhere Alloc fails.
type MemfdBacking struct{}

// NewMemfdBacking returns a backing whose Alloc fails off Linux.
func NewMemfdBacking() *MemfdBacking { return &MemfdBacking{} }

// Alloc fails off Linux.
func (*MemfdBacking) Alloc(int) ([]byte, error) { return nil, errNoMemfd }

// Free does nothing off Linux.
func (*MemfdBacking) Free([]byte) error { return nil }

// Dup fails off Linux.
func (*MemfdBacking) Dup([]byte) (int, error) { return -1, errNoMemfd }

// Renew fails off Linux.
func (*MemfdBacking) Renew([]byte) error { return errNoMemfd }

// MapFD fails off Linux.
func MapFD(int, int64) ([]byte, error) { return nil, errNoMemfd }

// UnmapShared does nothing off Linux.
func UnmapShared([]byte) error { return nil }

// Retire does nothing off Linux.
func (*MemfdBacking) Retire([]byte) {}

// Retired reports false off Linux.
func Retired([]byte) bool { return false }
