package segments

import "sync/atomic"

// A notification slot holds the epoch its value was set in (high half)
// and the value (low half). A value counts only while its epoch is not
// older than the segment's (Segment.SetEpoch): what a process of an older
// epoch set, or sets still, is not seen (docs/design.md §3).

func tagged(e, v uint32) uint64 { return uint64(e)<<32 | uint64(v) }

func epochOfSlot(w uint64) uint32 { return uint32(w >> 32) }

// slotValue is what slot word w says in epoch e: its value, or 0 when it
// was set in an older epoch.
func slotValue(w uint64, e uint32) uint32 {
	if epochOfSlot(w) < e {
		return 0
	}
	return uint32(w)
}

// setSlot stores v, set in epoch e, into slot, unless the slot holds a
// value of a newer epoch; it reports whether it stored. Never over a newer
// value: a writer of an older epoch cannot erase what a current one set.
func setSlot(slot *atomic.Uint64, v, e uint32) bool {
	for {
		old := slot.Load()
		if epochOfSlot(old) > e {
			return false
		}
		if slot.CompareAndSwap(old, tagged(e, v)) {
			return true
		}
	}
}

// resetSlot sets slot to zero in epoch e (or the slot's own, when newer)
// and returns the value it had in e.
func resetSlot(slot *atomic.Uint64, e uint32) uint32 {
	for {
		old := slot.Load()
		if slot.CompareAndSwap(old, tagged(max(epochOfSlot(old), e), 0)) {
			return slotValue(old, e)
		}
	}
}

// raise sets a to e if e is larger.
func raise(a *atomic.Uint32, e uint32) {
	for {
		old := a.Load()
		if e <= old || a.CompareAndSwap(old, e) {
			return
		}
	}
}
