package tree

import (
	"sync/atomic"
	"time"
)

// Heard is what a process learned from the tree's answers: the leader
// they named last and the freshest contact with the quorum they told of.
// The zero value has heard nothing. Safe for concurrent use.
type Heard struct {
	leader  atomic.Uint64 // the leader's proc + 1; 0: none named yet
	contact atomic.Int64  // unix ns; 0: never
}

// Record takes in one answer, got at got: the leader it names (None:
// none), and, when fresh, that the answerer had contact with the quorum
// age before it answered.
func (h *Heard) Record(leader uint32, fresh bool, age time.Duration, got time.Time) {
	if leader != None {
		h.leader.Store(uint64(leader) + 1)
	}
	if !fresh {
		return
	}
	t := got.Add(-age).UnixNano()
	for {
		old := h.contact.Load()
		if t <= old || h.contact.CompareAndSwap(old, t) {
			return
		}
	}
}

// Leader returns the leader the last answer that named one named; None
// and false before any did.
func (h *Heard) Leader() (uint32, bool) {
	p := h.leader.Load()
	if p == 0 {
		return None, false
	}
	return uint32(p - 1), true
}

// Contact returns the freshest contact with the quorum an answer told
// of; zero: none did.
func (h *Heard) Contact() time.Time {
	if ns := h.contact.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
