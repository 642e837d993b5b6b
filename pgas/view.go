package pgas

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/transport"
)

// view is an immutable picture of the membership: which process holds
// which rank in which epoch, and whether the job finished or cannot go on.
// The runtime swaps whole views atomically (Runtime.view), under viewMu
// together with viewChanged, so that a waiter that takes the channel and
// the view together (viewAndChan) misses no change.
//
// Its tables are indexed by Proc and cover the job's processes: the
// base ones (0..Config.NumProcs-1) and those that joined later
// (View.Joined). Their length, the view's size, never shrinks from one
// view to the next; an id inside it that is neither a base process, nor
// joined, nor a rank's holder never joined (isProc is false): it is
// neither live nor a spare, and not declared failed either.
type view struct {
	epoch  uint32
	ranks  []transport.Proc // rank -> proc; transport.NoProc for a vacant rank
	rankOf []int            // proc -> rank, -1 for none
	failed []bool           // proc -> declared failed
	live   []int            // ranks held by a process, ascending: GroupAll's members
	spares []transport.Proc // processes with no rank, not failed: the idle spares

	base   int      // Config.NumProcs: the processes the job formed with
	joined []Joiner // View.Joined, ascending by Proc: the processes that joined later

	liveOnce  sync.Once
	procsLive []transport.Proc // liveProcs, built on first use
	src       View             // the View this view was built from (sharedView)
	key       viewKey          // its interned content, when shared (sharedView)

	allShape atomic.Pointer[groupShape] // GroupAll's shape in this view (Group.shapeIn)

	digestOnce sync.Once
	digestHex  string // digest, built on first use

	finished bool  // the job finished (View.Finished, or every rank said goodbye to this spare)
	err      error // the membership's verdict that the job cannot go on (View.Err)
}

// newView builds a view of size processes, base of them the job's first
// ones, joined the others (ascending by Proc; each below size).
func newView(epoch uint32, ranks []transport.Proc, base, size int, joined []Joiner, failed []bool) *view {
	v := &view{epoch: epoch, ranks: ranks, rankOf: make([]int, size), failed: failed, live: make([]int, 0, len(ranks)),
		base: base, joined: joined}
	if v.failed == nil {
		v.failed = make([]bool, size)
	}
	for i := range v.rankOf {
		v.rankOf[i] = -1
	}
	for r, p := range ranks {
		if p != transport.NoProc && int(p) < size {
			v.rankOf[p] = r
			v.live = append(v.live, r)
		}
	}
	v.eachProc(func(p transport.Proc) {
		if v.rankOf[p] < 0 && !v.failed[p] {
			v.spares = append(v.spares, p)
		}
	})
	return v
}

// eachProc calls f for every process of the job in v (isProc), failed
// ones included, in Proc order: O(size), walking joined alongside.
func (v *view) eachProc(f func(p transport.Proc)) {
	j := 0
	for p := range v.size() {
		for j < len(v.joined) && int(v.joined[j].Proc) < p {
			j++
		}
		if p < v.base || v.rankOf[p] >= 0 || (j < len(v.joined) && int(v.joined[j].Proc) == p) {
			f(transport.Proc(p))
		}
	}
}

// size is the number of process ids the view's tables cover.
func (v *view) size() int { return len(v.failed) }

// isProc reports whether p is a process of the job in v: a base process,
// one that joined, or a rank's holder. Failed ones are processes too.
func (v *view) isProc(p transport.Proc) bool {
	switch {
	case int64(p) >= int64(len(v.failed)):
		return false
	case int(p) < v.base || v.rankOf[p] >= 0:
		return true
	}
	_, ok := v.joiner(p)
	return ok
}

// joiner returns p's entry in v.joined.
func (v *view) joiner(p transport.Proc) (Joiner, bool) {
	i, ok := slices.BinarySearchFunc(v.joined, p, func(j Joiner, p transport.Proc) int { return cmp.Compare(j.Proc, p) })
	if !ok {
		return Joiner{}, false
	}
	return v.joined[i], true
}

// isFailed reports whether v declares p failed; false for an id outside
// v, for code that holds a proc from a source newer than v (a peer
// allocated since v was loaded, the detector).
func (v *view) isFailed(p transport.Proc) bool {
	return int64(p) < int64(len(v.failed)) && v.failed[p]
}

// rankIn returns p's rank in v, -1 for none or an id outside v.
func (v *view) rankIn(p transport.Proc) int {
	if int64(p) >= int64(len(v.rankOf)) {
		return -1
	}
	return v.rankOf[p]
}

// firstViews holds the view every job starts in, by (ranks, processes,
// size): views are immutable, so the runtimes of one process share it (a
// simulation of thousands of ranks in one process would otherwise build
// thousands of identical O(N) tables).
var firstViews sync.Map // [3]int -> *view

// firstView returns epoch 0's view: process r holds rank r, the processes
// from numRanks up to numProcs are spares. size is numProcs, or more for
// a process that joined the job (Config.Proc >= NumProcs), whose own id
// must be inside its tables before the membership's view, applied next
// in Init, lists it.
func firstView(numRanks, numProcs, size int) *view {
	key := [3]int{numRanks, numProcs, size}
	if v, ok := firstViews.Load(key); ok {
		return v.(*view)
	}
	ranks := make([]transport.Proc, numRanks)
	for r := range ranks {
		ranks[r] = transport.Proc(r)
	}
	v, _ := firstViews.LoadOrStore(key, newView(0, ranks, numProcs, size, nil, nil))
	return v.(*view)
}

// withFinished returns a copy of v that says the job finished.
func (v *view) withFinished() *view {
	return &view{epoch: v.epoch, ranks: v.ranks, rankOf: v.rankOf, failed: v.failed, live: v.live,
		spares: v.spares, base: v.base, joined: v.joined, src: v.src, finished: true, err: v.err}
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

// applyView installs a committed view: the processes that joined the job
// learnt (their addresses to the transport, room in the peer table), new
// rank table and epoch, failed peers cut off, this process fenced if it
// was replaced, stale collective messages dropped, and the detector told
// whom to watch. Its own work is proportional to what changed (the
// processes newly joined or failed and the ranks they held), apart from
// building the view, which runtimes of one process share (sharedView).
func (rt *Runtime) applyView(mv View) {
	rt.viewMu.Lock()
	old := rt.view.Load()
	if uint32(mv.Epoch) < old.epoch || (uint32(mv.Epoch) == old.epoch && rt.sameView(old, mv)) {
		rt.viewMu.Unlock()
		return
	}
	size := max(old.size(), viewSize(mv, rt.cfg.NumProcs))
	if size > maxProcID {
		// Only a rank's holder gets here (a joiner with such an id is left
		// out): a rank no process can hold, so the job cannot go on.
		rt.viewMu.Unlock()
		rt.stopWith(fmt.Errorf("pgas: the view of epoch %d gives a rank to a process id at or above %d, beyond what a job may have: the membership is corrupt: %w", mv.Epoch, maxProcID, ErrInvalid), func() {
			rt.log.Error("stopped: a view gives a rank to an impossible process id; this process must exit", "epoch", mv.Epoch, "max_id", maxProcID-1)
		})
		return
	}
	// A joiner is reachable before any view that lists it is visible:
	// its address first, then room for it, then the view, then has.
	rt.learnJoiners(mv)
	rt.peers.grow(size)
	nv := sharedView(mv, rt.cfg.NumProcs, size)
	rt.viewObserved(nv, mv.Failed) // before anyone can see the view
	rt.raiseEpochs(nv)             // before anyone can see the view either (design §3)
	rt.view.Store(nv)
	rt.peers.admit(size)
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
		if int64(p) >= int64(nv.size()) || old.isFailed(p) {
			continue
		}
		if r := old.rankIn(p); r >= 0 {
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
	if len(nv.joined) > 0 {
		attrs = append(attrs, "joined", len(nv.joined), "procs", nv.size())
	}
	rt.log.Info("view applied", attrs...)
}

// maxProcID bounds the process ids a view may name: a view's tables are
// indexed by id, so an absurd id (a corrupt membership) would take all
// memory. Ids are handed out in order from 0, one per process ever
// started, so real jobs stay far below it.
const maxProcID = 1 << 24

// viewSize is the number of process ids mv's tables must cover: the job's
// first processes (base), every process that joined (those that cannot
// be joiners are left out: joinerErr), every rank's holder.
func viewSize(mv View, base int) int {
	n := base
	for _, j := range mv.Joined {
		if joinerErr(j, base) == nil {
			n = max(n, int(j.Proc)+1)
		}
	}
	for _, p := range mv.Ranks {
		if p != transport.NoProc {
			n = max(n, int(p)+1)
		}
	}
	return n
}

// joinerErr says what is wrong with j as an entry of View.Joined in a job
// of base first processes, nil when nothing is.
func joinerErr(j Joiner, base int) error {
	switch {
	case j.Proc == transport.NoProc:
		return fmt.Errorf("a joiner has no process id (NoProc)")
	case int(j.Proc) < base:
		return fmt.Errorf("proc %d is listed as a joiner, but ids below %d are the job's first processes", j.Proc, base)
	case int(j.Proc) >= maxProcID:
		return fmt.Errorf("proc %d is listed as a joiner, but ids stop at %d", j.Proc, maxProcID-1)
	}
	return nil
}

// learnJoiners gives the transport (transport.PeerAdder) the address of
// each process of mv.Joined that this runtime has not learnt yet, so
// that it is reachable before the first view that lists it is visible.
// A transport that cannot learn peers, or refuses an address, leaves the
// joiner unreachable: sends to it fail and the failure detector reports
// it, so the membership replaces it. viewMu is held.
func (rt *Runtime) learnJoiners(mv View) {
	for _, j := range mv.Joined {
		if j.Proc == rt.self {
			continue
		}
		if addr, ok := rt.joiners[j.Proc]; ok {
			if addr != j.Addr {
				rt.log.Error("a view gives a joined process another address than an earlier view did; the first one is kept (process ids are never reused, so the membership is inconsistent)",
					"joiner", j.Proc, "addr", addr, "new_addr", j.Addr, "epoch", mv.Epoch)
			}
			continue
		}
		if rt.joiners == nil {
			rt.joiners = make(map[transport.Proc]string)
		}
		rt.joiners[j.Proc] = j.Addr
		if err := joinerErr(j, rt.cfg.NumProcs); err != nil {
			rt.log.Error("a view lists a joined process that cannot be one; it is left out", "epoch", mv.Epoch, "err", err)
			continue
		}
		pa, ok := rt.tr.(transport.PeerAdder)
		if !ok {
			if !rt.noPeerAdder {
				rt.noPeerAdder = true
				rt.log.Error("processes joined the job, but the transport cannot learn new peers (no AddPeer): they stay unreachable from this process and the failure detector will report them; run the job over transport/tcp (or transport/route)",
					"transport", transport.NameOf(rt.tr), "joiner", j.Proc, "epoch", mv.Epoch)
			}
			continue
		}
		if err := pa.AddPeer(j.Proc, j.Addr); err != nil {
			rt.log.Error("the transport refused a joined process's address; it stays unreachable from this process and the failure detector will report it",
				"joiner", j.Proc, "addr", j.Addr, "epoch", mv.Epoch, "err", err)
			continue
		}
		rt.log.Info("a process joined the job", "joiner", j.Proc, "addr", j.Addr, "host", j.Host, "epoch", mv.Epoch)
	}
}

// buildView builds the view of mv (see sharedView). Joined entries that
// cannot be joiners (joinerErr; learnJoiners logs them) are left out.
func buildView(mv View, base, size int) *view {
	failed := make([]bool, size)
	for _, p := range mv.Failed {
		if int64(p) < int64(len(failed)) {
			failed[p] = true
		}
	}
	nv := newView(uint32(mv.Epoch), append([]transport.Proc(nil), mv.Ranks...), base, size, joinersOf(mv.Joined, base, size), failed)
	nv.finished, nv.err = mv.Finished, mv.Err
	nv.src = mv
	return nv
}

// joinersOf returns the entries of joined that can be joiners of a job of
// base first processes with size ids, ascending by Proc, one per Proc.
// The membership lists them so (View.Joined), and then joined itself is
// returned: views never change their tables, so the view may share it.
func joinersOf(joined []Joiner, base, size int) []Joiner {
	ok := true
	for i, j := range joined {
		if joinerErr(j, base) != nil || int(j.Proc) >= size || (i > 0 && joined[i-1].Proc >= j.Proc) {
			ok = false
			break
		}
	}
	if ok {
		return joined
	}
	var out []Joiner
	for _, j := range joined {
		if joinerErr(j, base) == nil && int(j.Proc) < size {
			out = append(out, j)
		}
	}
	slices.SortStableFunc(out, func(a, b Joiner) int { return cmp.Compare(a.Proc, b.Proc) })
	return slices.CompactFunc(out, func(a, b Joiner) bool { return a.Proc == b.Proc })
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
// ranks, failures, joined processes, status and error.
func (rt *Runtime) sameView(v *view, mv View) bool {
	if len(mv.Ranks) != len(v.ranks) || mv.Finished != v.finished || (mv.Err != nil) != (v.err != nil) ||
		len(mv.Joined) != len(v.src.Joined) {
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

// liveProcs lists the processes not declared failed, in Proc order (the
// processes that joined come after the job's first ones), built once per
// view. Ids that never joined are not listed.
func (v *view) liveProcs() []transport.Proc {
	v.liveOnce.Do(func() {
		v.procsLive = make([]transport.Proc, 0, len(v.failed))
		v.eachProc(func(p transport.Proc) {
			if !v.failed[p] {
				v.procsLive = append(v.procsLive, p)
			}
		})
	})
	return v.procsLive
}
