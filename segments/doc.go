// Package segments holds the memory that ranks expose for one-sided access.
//
// A Segment is a page-aligned byte region with an ID, plus a set of
// notification slots (GASPI-style: slot IDs 0..NumNotifications-1, each holding a
// 32-bit value, 0 meaning "not set"). Remote ranks address a segment as
// (rank, segment ID, offset); this package knows nothing about ranks or
// networks and has no clocks.
//
// Usage:
//
//	seg, err := segments.New(1, 1<<20, segments.Options{})
//	defer seg.Close()
//	xs, err := seg.Float64s(0, 1024) // typed view, no copy
//	err = seg.CopyIn(4096, payload)  // bounds-checked
//	seg.SetNotification(3, 1)       // after the data is in place
//	id, err := seg.WaitSome(ctx, 0, 8, segments.WaitPolicy{})
//	old := seg.ResetNotification(id)
//
// Concurrency: Bytes and the typed views alias segment memory; callers
// coordinate access to them (that is what notifications are for).
// CopyIn/CopyOut may race with other writers exactly like memcpy would.
// Notification methods are safe for concurrent use; a value set with
// SetNotification is visible to WaitSome only after every memory store the
// setter made before the call (release/acquire through sync/atomic).
//
// Backing: memory comes from a Backing. The default maps anonymous memory
// (page-aligned, with MADV_HUGEPAGE for large segments); FileBacking maps a
// file, so that a same-host transport can share the segment with peers.
// MemfdBacking maps a memfd per segment (nothing in any file system):
// another process of the host maps it with MapFD from a descriptor that
// Dup gives (passed over a Unix socket, SCM_RIGHTS), and Renew moves a segment to a fresh memfd at the same address,
// contents copied, so that the old mappings change nothing any more (how
// package pgas fences a replaced process at a recovery).
package segments
