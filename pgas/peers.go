package pgas

import (
	"sync/atomic"

	"github.com/gaspigo/gaspigo/transport"
)

// peerChunk is how many peers' slots a peerTable allocates at a time.
const peerChunk = 64

// peerTable holds the per-process protocol state (peer) of the processes
// this one talks to, indexed by Proc but allocated on first use: a process
// of a job of N holds N/64 chunk pointers plus one peer per process it
// ever exchanged a frame with (its ring, collective and mirror partners:
// O(log N) at rest), not N peers. Lookups are two atomic loads.
type peerTable struct {
	n      int
	chunks []atomic.Pointer[[peerChunk]atomic.Pointer[peer]]
	// failed is set once every peer must fail (Close, stopWith): a peer
	// allocated after that is failed at once with the same error.
	failed atomic.Pointer[error]
}

func newPeerTable(n int) *peerTable {
	return &peerTable{n: n, chunks: make([]atomic.Pointer[[peerChunk]atomic.Pointer[peer]], (n+peerChunk-1)/peerChunk)}
}

// size is the number of processes of the job.
func (t *peerTable) size() int { return t.n }

// has reports whether p is a process of the job.
func (t *peerTable) has(p transport.Proc) bool { return int64(p) < int64(t.n) }

// get returns p's peer, allocating it on first use. p must be a process
// of the job (has).
func (t *peerTable) get(p transport.Proc) *peer {
	c := t.chunks[p/peerChunk].Load()
	if c == nil {
		nc := new([peerChunk]atomic.Pointer[peer])
		if t.chunks[p/peerChunk].CompareAndSwap(nil, nc) {
			c = nc
		} else {
			c = t.chunks[p/peerChunk].Load()
		}
	}
	slot := &c[p%peerChunk]
	if pr := slot.Load(); pr != nil {
		return pr
	}
	pr := newPeer(p)
	if !slot.CompareAndSwap(nil, pr) {
		return slot.Load()
	}
	// Stored before the check, so failAll either sees this peer or this
	// check sees failAll's error.
	if err := t.failed.Load(); err != nil {
		pr.fail(*err)
	}
	return pr
}

// lookup returns p's peer, or nil if this process never used it (nor is p
// a process of the job). A peer never used is not down and never said
// goodbye.
func (t *peerTable) lookup(p transport.Proc) *peer {
	if !t.has(p) {
		return nil
	}
	c := t.chunks[p/peerChunk].Load()
	if c == nil {
		return nil
	}
	return c[p%peerChunk].Load()
}

// each calls f for every allocated peer, in Proc order.
func (t *peerTable) each(f func(*peer)) {
	for i := range t.chunks {
		c := t.chunks[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if pr := c[j].Load(); pr != nil {
				f(pr)
			}
		}
	}
}

// failAll fails every peer, those allocated later included, with err
// (the first error a peer gets wins).
func (t *peerTable) failAll(err error) {
	t.failed.CompareAndSwap(nil, &err)
	t.each(func(pr *peer) { pr.fail(err) })
}

// isDown reports whether p's connection was lost; false for a peer never
// used.
func (t *peerTable) isDown(p transport.Proc) bool {
	pr := t.lookup(p)
	return pr != nil && pr.isDown()
}

// departed reports whether p said goodbye.
func (t *peerTable) departed(p transport.Proc) bool {
	pr := t.lookup(p)
	return pr != nil && pr.departed.Load()
}
