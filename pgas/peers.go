package pgas

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/transport"
)

// peerChunk is how many peers' slots a peerTable allocates at a time.
const peerChunk = 64

// peerCell holds one chunk of peers, allocated on first use.
type peerCell = atomic.Pointer[[peerChunk]atomic.Pointer[peer]]

// peerTable holds the per-process protocol state (peer) of the processes
// this one talks to, indexed by Proc but allocated on first use: a process
// of a job of N holds N/64 cell pointers plus one peer per process it
// ever exchanged a frame with (its ring, collective and mirror partners:
// O(log N) at rest), not N peers.
//
// The process space grows when processes join the job (View.Joined), and
// the lookups take no lock for it: the directory of cells sits behind an
// atomic pointer and is copied on growth. The copy shares the cells, so a
// chunk or peer stored through an old directory is seen through the new
// one, and a Proc never gets two peers. A lookup is three atomic loads.
//
// Growth comes in two steps, both under the runtime's viewMu (applyView):
// grow makes room before a larger view is stored, and admit raises the
// count that has reports after it is stored. So code that saw has(p)
// finds p in every view it loads afterwards, and code that found p in a
// view finds room for p here.
type peerTable struct {
	n      atomic.Int64                // has: the processes of the stored view
	dir    atomic.Pointer[[]*peerCell] // cells, one per peerChunk processes; only grows
	growMu sync.Mutex                  // serialises grow
	// failed is set once every peer must fail (Close, stopWith): a peer
	// allocated after that is failed at once with the same error.
	failed atomic.Pointer[error]
}

func newPeerTable(n int) *peerTable {
	t := &peerTable{}
	dir := []*peerCell{}
	t.dir.Store(&dir)
	t.grow(n)
	t.admit(n)
	return t
}

// grow makes room for processes 0..n-1. It never shrinks the table.
func (t *peerTable) grow(n int) {
	t.growMu.Lock()
	defer t.growMu.Unlock()
	old := *t.dir.Load()
	want := (n + peerChunk - 1) / peerChunk
	if want <= len(old) {
		return
	}
	dir := make([]*peerCell, want)
	copy(dir, old)
	for i := len(old); i < want; i++ {
		dir[i] = new(peerCell)
	}
	t.dir.Store(&dir)
}

// admit makes processes 0..n-1 processes of the job for has, once a view
// of at least n processes is stored (and grow(n) made room). It never
// lowers the count.
func (t *peerTable) admit(n int) {
	for {
		cur := t.n.Load()
		if int64(n) <= cur || t.n.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// has reports whether p is a process of the job in the stored view (a
// process id that never joined, below the highest that did, is inside it
// too: view.isProc tells them apart).
func (t *peerTable) has(p transport.Proc) bool { return int64(p) < t.n.Load() }

// cell returns the cell of p's chunk, nil when the table has no room for p.
func (t *peerTable) cell(p transport.Proc) *peerCell {
	dir := *t.dir.Load()
	if i := int(p / peerChunk); i < len(dir) {
		return dir[i]
	}
	return nil
}

// get returns p's peer, allocating it on first use. p must be a process
// of the job: it passed has, or is in a view this runtime stored (grow
// came first). Anything else is a bug in the caller, and panics.
func (t *peerTable) get(p transport.Proc) *peer {
	cell := t.cell(p)
	if cell == nil {
		panic(fmt.Sprintf("pgas: peer table: no room for proc %d: it is in no view this process stored", p))
	}
	c := cell.Load()
	if c == nil {
		nc := new([peerChunk]atomic.Pointer[peer])
		if cell.CompareAndSwap(nil, nc) {
			c = nc
		} else {
			c = cell.Load()
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
	cell := t.cell(p)
	if cell == nil {
		return nil
	}
	c := cell.Load()
	if c == nil {
		return nil
	}
	return c[p%peerChunk].Load()
}

// each calls f for every allocated peer, in Proc order.
func (t *peerTable) each(f func(*peer)) {
	for _, cell := range *t.dir.Load() {
		c := cell.Load()
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
