package pgas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Operations without frames (docs/design.md §9.3). A same-host peer's
// segment is mapped here with its notification area
// (segments.PeerNotes), so a Write, WriteNotify or Notify to it is done in
// its memory by this goroutine: the data copied, then the notification
// stored into the peer's slot, tagged with this process's epoch. Nothing
// goes through the transport unless a waiter of the peer is parked (a
// ctlWake frame, carrying nothing but the segment).
//
// Fencing (docs/design.md §3) is by epoch: the peer raises the epoch of its
// areas before anything of its sees a newer view. A copy is made only
// between Enter, which fails once the peer is in a newer epoch, and Exit,
// and the peer's Recover waits for the copies it admitted; a slot set in an
// older epoch reads as not set; Wait's fence (PeerNotes.Fence) fails once
// the peer is in a newer epoch. So a process declared failed (never in the
// epoch that declares it) and a survivor still in the older epoch change no
// slot the peer reads from its view on, and no data once its Recover
// returned; their Waits fail as a refused frame would.
//
// Order (docs/design.md §2.3, "Ordering and notifications") is kept by
// doing an operation in memory only when the peer is quiet: no sequenced
// frame unacknowledged, no request unanswered. Otherwise it goes by frame,
// data and all, behind what is on its way. Operations in memory are
// complete when the call returns, so a frame sent after them is behind them
// too.

// ctlWake: a process set a notification of segment h.Seg directly and saw
// a parked waiter.
const ctlWake = 3

var (
	directWrites = obs.DirectOps.With("write").Counter
	directNotes  = obs.DirectOps.With("notify").Counter
	directWakes  = obs.DirectOps.With("wake").Counter
)

// How long a wait for a notification in shared memory polls before it
// parks: autoSpin when every rank of the host has a CPU of its own (long
// enough for a peer's answer in a tight exchange, a round trip being a
// microsecond or less; short against anything a program computes), and
// yieldSpin, giving the CPU away between looks, when the host has up to
// yieldRatio ranks per CPU: parking and being woken by a frame cost tens
// of microseconds there (4 ranks on 2 cores: a write+notify round trip of
// 64 us parked, against 56 us over TCP). Beyond that, waits park at once.
const (
	autoSpin   = 50 * time.Microsecond
	yieldSpin  = 20 * time.Microsecond
	yieldRatio = 4
)

// chooseSpin picks how NotifyWaitSome polls a segment whose slots are
// shared, and a collective its area, before parking: Config.SpinWait when
// set, else from the ranks on this host against its usable CPUs (see
// autoSpin). Init calls it once; the metrics show the choice.
func (rt *Runtime) chooseSpin() segments.WaitPolicy {
	p := segments.WaitPolicy{Spin: rt.cfg.SpinWait}
	if p.Spin == 0 && rt.directOn() {
		loc := rt.tr.(transport.Locality)
		near := 1
		for _, q := range rt.view.Load().ranks {
			if q != rt.self && q != transport.NoProc && loc.IsNear(q) {
				near++
			}
		}
		switch cpus := runtime.NumCPU(); {
		case near <= cpus:
			p.Spin = autoSpin
		case near <= yieldRatio*cpus:
			p.Spin, p.Yield = yieldSpin, true
		}
	}
	obs.WaitSpin.Set(p.Spin.Seconds())
	if p.Yield {
		obs.WaitYields.Set(1)
	} else {
		obs.WaitYields.Set(0)
	}
	return p
}

// postDirect tries to do h (a FrameWrite with payload, or a FrameNotify)
// of epoch e in proc's memory (samehost.Put decides). It reports whether
// it did, where (the peer's memory and slots, for Wait's fence and
// postMem's next operations), whether a waiter must be woken, and
// whether the peer's slot held a value of a newer epoch (stale: Wait
// fails).
func (rt *Runtime) postDirect(pr *peer, proc transport.Proc, h *transport.Header, payload []byte, e uint32) (done bool, t memTarget, wake, stale bool) {
	d, m, ok := rt.mappedPeer(h.Seg, proc)
	if !ok {
		return false, memTarget{}, false, false
	}
	defer d.Release()
	notify := h.Type == transport.FrameNotify || h.Flags&transport.FlagNotify != 0
	// (Clamped: out of any range, so by frame, which the target refuses.)
	op := samehost.Op{Off: int64(min(h.Off, math.MaxInt64)), Data: payload, Notify: notify, ID: int(min(h.A, math.MaxInt32)), Val: uint32(h.B)}
	// post found the peer not down, and reserved the queue's place.
	done, wake, set := samehost.Put(m, op, samehost.State{Quiet: pr.quiet()}, -1, e)
	if !done {
		return false, memTarget{}, false, false
	}
	if len(payload) > 0 {
		rt.stats.DirectWrites.Add(1)
		directWrites.Inc()
	}
	if notify {
		rt.stats.DirectNotes.Add(1)
		directNotes.Inc()
	}
	return true, memTarget{Target: samehost.Target{Seg: d, Mem: m, Proc: proc}, pr: pr}, wake, !set
}

// mappedPeer returns proc's memory of segment seg, mapped in the current
// view's epoch (mapping it on first use), with d held shared
// (samehost.Seg.Get: the caller calls d.Release); ok is false (and
// nothing held) when there is none.
func (rt *Runtime) mappedPeer(seg uint16, proc transport.Proc) (d *samehost.Seg, m samehost.Mem, ok bool) {
	si := rt.lookupSeg(segments.ID(seg))
	if si == nil {
		return nil, samehost.Mem{}, false
	}
	d = si.direct.Load()
	if d == nil || d.Epoch() != rt.view.Load().epoch {
		return nil, samehost.Mem{}, false
	}
	m, ok = d.Get(proc, func() { rt.mapPeer(si, d, proc) })
	if !ok {
		return nil, samehost.Mem{}, false
	}
	return d, m, true
}

// wakeTimeout bounds a wake-up sent in the background (wake): past it the
// peer is failing, and its waiters wake when its loss or the next view
// reaches them.
const wakeTimeout = 30 * time.Second

// wake tells proc that a slot of its segment seg was set while a waiter
// was parked. The slot is set already, so the wake-up must go whatever
// the caller's ctx says: when ctx ends before it is sent (or the send
// fails while the peer is not known lost), it is sent again in the
// background, on the runtime's lifetime, until it goes, the peer is lost
// (its waiters then wake on this process's loss), or the runtime stops.
func (rt *Runtime) wake(ctx context.Context, proc transport.Proc, seg uint16) {
	rt.faultPoint(PointStoreWake) // the chaos suite's kill between the store and its wake-up
	h := transport.Header{Type: transport.FrameControl, A: ctlWake, Seg: seg}
	if rt.send(ctx, proc, &h, nil) == nil {
		rt.woke()
		return
	}
	rt.goFunc(func() {
		ctx, cancel := context.WithTimeout(rt.life, wakeTimeout)
		defer cancel()
		b := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Millisecond), backoff.WithMaxInterval(100*time.Millisecond), backoff.WithMaxElapsedTime(0)), ctx)
		backoff.Retry(func() error {
			if rt.peers.get(proc).isDown() {
				return nil // lost: nobody to wake there
			}
			h := transport.Header{Type: transport.FrameControl, A: ctlWake, Seg: seg}
			if err := rt.send(ctx, proc, &h, nil); err != nil {
				return err
			}
			rt.woke()
			return nil
		}, b)
	})
}

func (rt *Runtime) woke() {
	rt.stats.Wakes.Add(1)
	directWakes.Inc()
}

// fenceDirect is Wait's remote completion for an operation done in
// memory. When the fence fails, a frame finds out why (probe).
func (rt *Runtime) fenceDirect(ctx context.Context, op pendingOp) error {
	if !op.stale && op.notes.Fence(op.epoch) {
		return nil
	}
	return rt.probe(ctx, op, movedErr(op))
}

// probe sends op's peer an empty sequenced write (it changes nothing
// there) and waits for its outcome, to tell apart why the peer no longer
// reads the memory op went to: this process was replaced (the write is
// refused as fenced, and the process stops, as when a frame of its is
// refused), it is in an older epoch (refused as stale), or the peer moved
// on otherwise (it returns err).
func (rt *Runtime) probe(ctx context.Context, op pendingOp, err error) error {
	pr := op.peer
	h := transport.Header{Type: transport.FrameWrite, Flags: transport.FlagAck}
	pr.sendMu.Lock()
	h.Seq = pr.nextSeq.Add(1)
	serr := rt.send(ctx, pr.proc, &h, nil)
	pr.sendMu.Unlock()
	if serr != nil {
		return rt.sendErr(ctx, serr, op.rank, pr.proc, op.op)
	}
	if werr := rt.waitAck(ctx, pendingOp{rank: op.rank, peer: pr, seq: h.Seq, op: op.op}); werr != nil && !errors.Is(werr, ErrNoSegment) {
		return werr
	}
	return err
}

// movedErr is what a failed fence says when the peer is in this epoch.
func movedErr(op pendingOp) error {
	// As a refused doorbell would say: the target is in a newer epoch, or
	// deleted the segment.
	return fmt.Errorf("pgas: %s: rank %d no longer reads the memory written (a newer view, or the segment deleted): %w: %w", op.op, op.rank, ErrRemote, ErrStaleEpoch)
}

// raiseEpochs raises every local segment's epoch to v's and wakes its
// waiters (segments.Segment.SetEpoch). applyView calls it under viewMu,
// before the view is seen: from then on no slot set in an older epoch
// counts, no process of an older epoch is admitted to copy into a segment,
// and their fences fail. SegmentCreate raises a new segment's epoch under
// viewMu too, so none is missed.
func (rt *Runtime) raiseEpochs(v *view) {
	for _, si := range rt.segList() {
		si.seg.SetEpoch(v.epoch)
	}
}

// wakeSegments wakes the parked waiters of every local segment to look at
// their slots again: a peer was lost, maybe between its store and its
// wake-up.
func (rt *Runtime) wakeSegments() {
	for _, si := range rt.segList() {
		si.seg.Wake()
	}
}

// segList returns the local segments now.
func (rt *Runtime) segList() []*segInfo {
	rt.segMu.RLock()
	defer rt.segMu.RUnlock()
	sis := make([]*segInfo, 0, len(rt.segs))
	for _, si := range rt.segs {
		sis = append(sis, si)
	}
	return sis
}

// memTarget is a peer's memory that operations were done in
// (samehost.Target), and whom it is of: enough for the next ones to the
// same rank and segment in the same view to skip every lookup (postMem).
type memTarget struct {
	samehost.Target
	view *view
	rank int
	seg  segments.ID
	pr   *peer
}

// directCounts are what a queue did in memory since its last Wait.
type directCounts struct{ writes, notes uint64 }

// addMem records an operation postDirect did in memory, in place of the
// place reserve took, and keeps its target for postMem.
func (qu *queue) addMem(op pendingOp, t memTarget) {
	qu.mu.Lock()
	qu.reserved--
	qu.pending = append(qu.pending, op)
	qu.mem = t
	qu.mu.Unlock()
}

// postMem is the short way of an operation done in memory: a write of src
// (maybe empty) to rank's segment remote.Seg at remote.Off, with a
// notification when notify, done through queue q's last target
// (qu.mem) when the operation goes to the same rank and segment in the
// same view, the peer is quiet, and the range fits. One lock, the
// queue's, and no lookup: the target stays mapped while it is held
// (dropDirect takes every queue's lock to retire it). It reports false,
// having done nothing, when the general way must be taken.
func (rt *Runtime) postMem(ctx context.Context, q Queue, rank int, remote Loc, src []byte, notify bool, id segments.NotificationID, val uint32, op string) bool {
	if q < 0 || int(q) >= len(rt.queues) {
		return false
	}
	qu := rt.queues[q]
	v := rt.view.Load()
	qu.mu.Lock()
	t := &qu.mem
	pm := t.Mem
	// samehost.InMemory's conditions and samehost.Put's steps, written
	// out: through the calls an 8-byte write cost 45 ns instead of 30
	// (gaspibench, paired runs on a quiet machine). Keep the two in step:
	// a condition added there belongs here too.
	if t.view != v || t.rank != rank || t.seg != remote.Seg || !t.Live() ||
		qu.posted() >= rt.cfg.QueueDepth || rt.isClosed() || rt.halted() != nil ||
		rt.member != nil && rt.appEpoch.Load() != v.epoch ||
		remote.Off < 0 || remote.Off > int64(len(pm.Mem)) || int64(len(src)) > int64(len(pm.Mem))-remote.Off ||
		notify && int(id) >= pm.Notes.Len() ||
		t.pr.downFlag.Load() || !t.pr.quiet() || segments.Retired(pm.Mem) {
		qu.mu.Unlock()
		return false
	}
	if !pm.Notes.EnterQueue(int(q), v.epoch) {
		qu.mu.Unlock()
		return false
	}
	samehost.Copy(pm.Mem[remote.Off:], src)
	wake, set := false, true
	if notify {
		wake, set = pm.Notes.Store(id, val, v.epoch)
	}
	pm.Notes.ExitQueue(int(q))
	if notify {
		qu.counts.notes++
	}
	if len(src) > 0 {
		qu.counts.writes++
	}
	if n := len(qu.pending); n > 0 && qu.pending[n-1].notes == pm.Notes && qu.pending[n-1].rank == rank && qu.pending[n-1].epoch == v.epoch {
		qu.merged++ // the entry before stands for it: Wait fences those slots once
		qu.pending[n-1].stale = qu.pending[n-1].stale || !set
	} else {
		qu.pending = append(qu.pending, pendingOp{rank: rank, peer: t.pr, op: op, notes: pm.Notes, epoch: v.epoch, stale: !set})
	}
	proc := t.Proc
	qu.mu.Unlock()
	if wake {
		rt.wake(ctx, proc, uint16(remote.Seg))
	}
	return true
}

// flushCounts adds what qu did in memory to the runtime's statistics and
// the metrics. The caller holds qu.mu.
func (rt *Runtime) flushCounts(qu *queue) {
	c := qu.counts
	qu.counts = directCounts{}
	if c.writes > 0 {
		rt.stats.DirectWrites.Add(c.writes)
		directWrites.Add(c.writes)
	}
	if c.notes > 0 {
		rt.stats.DirectNotes.Add(c.notes)
		directNotes.Add(c.notes)
	}
}
