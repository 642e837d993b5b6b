package pgas

import (
	"fmt"

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
	return v
}

// withFinished returns a copy of v that says the job finished.
func (v *view) withFinished() *view {
	nv := *v
	nv.finished = true
	return &nv
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
		if p != transport.NoProc && !rt.peers[p].departed.Load() {
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
// messages dropped, and the detector told whom to watch.
func (rt *Runtime) applyView(mv View) {
	rt.viewMu.Lock()
	old := rt.view.Load()
	if uint32(mv.Epoch) < old.epoch || (uint32(mv.Epoch) == old.epoch && rt.sameView(old, mv)) {
		rt.viewMu.Unlock()
		return
	}
	failed := make([]bool, len(rt.peers))
	for _, p := range mv.Failed {
		if int(p) < len(failed) {
			failed[p] = true
		}
	}
	nv := newView(uint32(mv.Epoch), append([]transport.Proc(nil), mv.Ranks...), len(rt.peers), failed)
	nv.finished, nv.err = mv.Finished, mv.Err
	rt.viewObserved(nv, mv.Failed) // before anyone can see the view
	rt.view.Store(nv)
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)

	wasRank := old.rankOf[rt.self] >= 0
	if failed[rt.self] || (wasRank && nv.rankOf[rt.self] < 0 && !mv.Finished) {
		rt.fence(fmt.Sprintf("epoch %d replaced this process", mv.Epoch))
		return
	}
	for p, f := range failed {
		if f && !old.failed[p] && transport.Proc(p) != rt.self {
			cause := fmt.Errorf("declared failed in epoch %d", mv.Epoch)
			rt.cutOff(transport.Proc(p), cause)
			rt.disconnect(transport.Proc(p), cause)
		}
	}
	rt.reportVacant(old, nv)
	rt.mail.purge(nv.epoch)
	if rt.det != nil {
		rt.det.SetMembers(rt.liveProcs(nv))
	}
	holders := make([]int, len(nv.ranks)) // rank -> proc, -1 vacant
	for r, p := range nv.ranks {
		holders[r] = -1
		if p != transport.NoProc {
			holders[r] = int(p)
		}
	}
	attrs := []any{"epoch", mv.Epoch, "rank", nv.rankOf[rt.self], "failed", mv.Failed, "ranks", holders}
	if len(nv.live) < len(nv.ranks) {
		var vacant []int
		for r, p := range nv.ranks {
			if p == transport.NoProc {
				vacant = append(vacant, r)
			}
		}
		attrs = append(attrs, "vacant", vacant)
	}
	rt.log.Info("view applied", attrs...)
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

// liveProcs lists the processes not declared failed.
func (rt *Runtime) liveProcs(v *view) []transport.Proc {
	var ps []transport.Proc
	for p := range rt.peers {
		if !v.failed[p] {
			ps = append(ps, transport.Proc(p))
		}
	}
	return ps
}
