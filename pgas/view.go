package pgas

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/gaspigo/gaspigo/transport"
)

// view is an immutable picture of the membership: which process holds
// which rank in which epoch, and whether the job finished or cannot go on.
// The runtime swaps whole views atomically (Runtime.view), under viewMu
// together with viewChanged, so that a waiter that takes the channel and
// the view together (viewAndChan) misses no change.
type view struct {
	epoch  uint32
	ranks  []transport.Proc // rank -> proc; transport.NoProc for a vacant rank
	rankOf []int            // proc -> rank, -1 for none
	failed []bool           // proc -> declared failed
	live   []int            // ranks held by a process, ascending: GroupAll's members
	spares []transport.Proc // processes with no rank, not failed: the idle spares

	liveOnce  sync.Once
	procsLive []transport.Proc // liveProcs, built on first use
	src       View             // the View this view was built from (sharedView)

	allShape atomic.Pointer[groupShape] // GroupAll's shape in this view (Group.shapeIn)

	digestOnce sync.Once
	digestHex  string // digest, built on first use

	finished bool  // the job finished (View.Finished, or every rank said goodbye to this spare)
	err      error // the membership's verdict that the job cannot go on (View.Err)
}

func newView(epoch uint32, ranks []transport.Proc, numProcs int, failed []bool) *view {
	v := &view{epoch: epoch, ranks: ranks, rankOf: make([]int, numProcs), failed: failed, live: make([]int, 0, len(ranks))}
	if v.failed == nil {
		v.failed = make([]bool, numProcs)
	}
	for i := range v.rankOf {
		v.rankOf[i] = -1
	}
	for r, p := range ranks {
		if p != transport.NoProc && int(p) < numProcs {
			v.rankOf[p] = r
			v.live = append(v.live, r)
		}
	}
	for p, r := range v.rankOf {
		if r < 0 && !v.failed[p] {
			v.spares = append(v.spares, transport.Proc(p))
		}
	}
	return v
}

// firstViews holds the view every job starts in, by (ranks, processes):
// views are immutable, so the runtimes of one process share it (a
// simulation of thousands of ranks in one process would otherwise build
// thousands of identical O(N) tables).
var firstViews sync.Map // [2]int -> *view

// firstView returns epoch 0's view: process r holds rank r, the processes
// from numRanks up are spares.
func firstView(numRanks, numProcs int) *view {
	key := [2]int{numRanks, numProcs}
	if v, ok := firstViews.Load(key); ok {
		return v.(*view)
	}
	ranks := make([]transport.Proc, numRanks)
	for r := range ranks {
		ranks[r] = transport.Proc(r)
	}
	v, _ := firstViews.LoadOrStore(key, newView(0, ranks, numProcs, nil))
	return v.(*view)
}

// withFinished returns a copy of v that says the job finished.
func (v *view) withFinished() *view {
	return &view{epoch: v.epoch, ranks: v.ranks, rankOf: v.rankOf, failed: v.failed, live: v.live,
		spares: v.spares, src: v.src, finished: true, err: v.err}
}

// spareSeesEnd: an idle spare that has heard goodbye from every rank's
// process knows the job is over even if the membership can no longer say
// so (the ranks' processes were most of its voters and have left).
func (rt *Runtime) spareSeesEnd() {
	v := rt.view.Load()
	if v.rankOf[rt.self] >= 0 {
		return
	}
	for _, p := range v.ranks {
		if p != transport.NoProc && !rt.peers.departed(p) {
			return
		}
	}
	rt.viewMu.Lock()
	cur := rt.view.Load()
	if cur.finished {
		rt.viewMu.Unlock()
		return
	}
	rt.view.Store(cur.withFinished())
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)
	rt.log.Info("every rank said goodbye: the job is over for this spare")
}

// check returns the error every call gives once the runtime is closed or
// fenced, or once a newer epoch was committed than the program's.
func (rt *Runtime) check() error {
	_, err := rt.current()
	return err
}

// current returns the view an operation runs in, loaded once: checking
// the epoch and then loading the view again would let a view applied in
// between start a collective in an epoch the program never acknowledged.
func (rt *Runtime) current() (*view, error) {
	if rt.isClosed() {
		return nil, ErrClosed
	}
	if err := rt.halted(); err != nil {
		return nil, err
	}
	v := rt.view.Load()
	if rt.member != nil {
		if app := rt.appEpoch.Load(); v.epoch != app {
			return nil, fmt.Errorf("pgas: epoch %d committed, the program is in epoch %d: call Recover: %w", v.epoch, app, ErrStaleEpoch)
		}
	}
	return v, nil
}

// Usable returns the error every call would return now: ErrClosed,
// ErrFenced, or ErrStaleEpoch once a newer epoch was committed than the
// program acknowledged; nil otherwise. Layers that wait on notifications
// (which no failure interrupts) poll it.
func (rt *Runtime) Usable() error { return rt.check() }

// viewChan returns a channel that closes at the next applied view.
func (rt *Runtime) viewChan() <-chan struct{} {
	_, ch := rt.viewAndChan()
	return ch
}

// viewAndChan returns the current view and the channel that closes when
// it is replaced (or when this process stops: stopWith).
func (rt *Runtime) viewAndChan() (*view, <-chan struct{}) {
	rt.viewMu.Lock()
	defer rt.viewMu.Unlock()
	return rt.view.Load(), rt.viewChanged
}

// applyView installs a committed view: new rank table and epoch, failed
// peers cut off, this process fenced if it was replaced, stale collective
// messages dropped, and the detector told whom to watch. Its own work is
// proportional to what changed (the processes newly failed and the ranks
// they held), apart from building the view, which runtimes of one process
// share (sharedView).
func (rt *Runtime) applyView(mv View) {
	rt.viewMu.Lock()
	old := rt.view.Load()
	if uint32(mv.Epoch) < old.epoch || (uint32(mv.Epoch) == old.epoch && rt.sameView(old, mv)) {
		rt.viewMu.Unlock()
		return
	}
	nv := sharedView(mv, rt.peers.size())
	rt.viewObserved(nv, mv.Failed) // before anyone can see the view
	rt.raiseEpochs(nv)             // before anyone can see the view either (design §3)
	rt.view.Store(nv)
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)

	wasRank := old.rankOf[rt.self] >= 0
	if nv.failed[rt.self] || (wasRank && nv.rankOf[rt.self] < 0 && !mv.Finished) {
		rt.fence(fmt.Sprintf("epoch %d replaced this process", mv.Epoch))
		return
	}
	var moved []int // rank, old holder, new holder (-1 vacant), for the log
	for _, p := range mv.Failed {
		if int(p) >= len(old.failed) || old.failed[p] {
			continue
		}
		if r := old.rankOf[p]; r >= 0 {
			holder := -1
			if q := nv.ranks[r]; q != transport.NoProc {
				holder = int(q)
			}
			moved = append(moved, r, int(p), holder)
		}
		if p != rt.self {
			cause := fmt.Errorf("declared failed in epoch %d", mv.Epoch)
			rt.cutOff(p, cause)
			rt.disconnect(p, cause)
		}
	}
	rt.reportVacant(old, nv)
	rt.mail.purge(nv.epoch)
	rt.coll.Retire(nv.epoch)
	if rt.det != nil {
		rt.det.SetMembers(nv.liveProcs())
	}
	// "table" is a digest of the whole rank table, so that tools can check
	// that every process applied the same one without an O(N) line each;
	// "moved" lists (rank, old process, new process) for each rank whose
	// holder changed since this process's previous view.
	attrs := []any{"epoch", mv.Epoch, "rank", nv.rankOf[rt.self], "failed", mv.Failed, "moved", moved, "table", nv.digest()}
	if len(nv.live) < len(nv.ranks) {
		attrs = append(attrs, "vacant", len(nv.ranks)-len(nv.live))
	}
	rt.log.Info("view applied", attrs...)
}

// viewKey names a View by the identity of its tables: a membership that
// hands the same View to several runtimes of one process (a simulation of
// thousands of ranks, pgastest) gets one view built for all of them.
type viewKey struct {
	epoch          uint64
	ranks, failed  *transport.Proc
	nRanks, nFail  int
	numProcs       int
	finished, errs bool
}

// sharedViews maps a viewKey to the view built from it, while that view
// lives (a cleanup removes the entry when it is collected).
var sharedViews sync.Map // viewKey -> weak.Pointer[view]

// sharedView returns the view of mv for a job of numProcs processes,
// built once per View value: the runtimes of one process that apply the
// same View (same tables) share it. Views are immutable; the view keeps
// mv's tables alive, so a key cannot name two different tables while
// its view lives.
func sharedView(mv View, numProcs int) *view {
	if len(mv.Ranks) == 0 {
		return buildView(mv, numProcs)
	}
	key := viewKey{epoch: mv.Epoch, ranks: unsafe.SliceData(mv.Ranks), nRanks: len(mv.Ranks),
		failed: unsafe.SliceData(mv.Failed), nFail: len(mv.Failed), numProcs: numProcs,
		finished: mv.Finished, errs: mv.Err != nil}
	if w, ok := sharedViews.Load(key); ok {
		if v := w.(weak.Pointer[view]).Value(); v != nil && v.err == mv.Err {
			return v
		}
	}
	v := buildView(mv, numProcs)
	if mv.Err == nil {
		w := weak.Make(v)
		sharedViews.Store(key, w)
		runtime.AddCleanup(v, func(e sharedEntry) { sharedViews.CompareAndDelete(e.key, e.w) }, sharedEntry{key, w})
	}
	return v
}

type sharedEntry struct {
	key viewKey
	w   weak.Pointer[view]
}

// buildView builds the view of mv.
func buildView(mv View, numProcs int) *view {
	failed := make([]bool, numProcs)
	for _, p := range mv.Failed {
		if int(p) < len(failed) {
			failed[p] = true
		}
	}
	nv := newView(uint32(mv.Epoch), append([]transport.Proc(nil), mv.Ranks...), numProcs, failed)
	nv.finished, nv.err = mv.Finished, mv.Err
	nv.src = mv
	return nv
}

// reportVacant tells the launcher about the ranks vacant in nv and not in
// old (nil: none), so that it counts them as done rather than lost.
func (rt *Runtime) reportVacant(old, nv *view) {
	l := rt.launcher.Load()
	if l == nil {
		return
	}
	for r, p := range nv.ranks {
		if p == transport.NoProc && (old == nil || old.ranks[r] != transport.NoProc) {
			(*l).Vacant(r, uint64(nv.epoch))
		}
	}
}

// sameView reports whether mv says nothing that v does not: the same
// ranks, failures, status and error.
func (rt *Runtime) sameView(v *view, mv View) bool {
	if len(mv.Ranks) != len(v.ranks) || mv.Finished != v.finished || (mv.Err != nil) != (v.err != nil) {
		return false
	}
	for r, p := range mv.Ranks {
		if v.ranks[r] != p {
			return false
		}
	}
	n := 0
	for _, f := range v.failed {
		if f {
			n++
		}
	}
	return n == len(mv.Failed)
}

// digest is a CRC32C of v's rank table, in hex.
func (v *view) digest() string {
	v.digestOnce.Do(func() {
		b := make([]byte, 4*len(v.ranks))
		for r, p := range v.ranks {
			binary.LittleEndian.PutUint32(b[4*r:], uint32(p))
		}
		v.digestHex = fmt.Sprintf("%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	})
	return v.digestHex
}

// liveProcs lists the processes not declared failed, in Proc order,
// built once per view.
func (v *view) liveProcs() []transport.Proc {
	v.liveOnce.Do(func() {
		v.procsLive = make([]transport.Proc, 0, len(v.failed))
		for p, f := range v.failed {
			if !f {
				v.procsLive = append(v.procsLive, transport.Proc(p))
			}
		}
	})
	return v.procsLive
}
