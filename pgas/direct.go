package pgas

import (
	"context"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Direct writes (Config.DirectShm): a segment lives in a memfd, its
// notification slots in another (segments.Options.ShareNotifications),
// and the processes of one host map each other's, so that a Write,
// WriteNotify or Notify to a rank on this host is done in its memory: the
// data copied, the notification stored into its slot, Wait's completion a
// fence on its slots' memory, no frame (directnote.go). When the peer is
// not quiet (a frame to it is still on its way), its slots are not mapped,
// or it is in a newer epoch, the operation goes by frame, data and all.
// Either way:
//
//   - the notification is set after the data is visible;
//   - Wait means remote completion in the memory the target uses, in the
//     epoch the operation ran in;
//   - a write that raced a view change fails as over the network (the
//     fence fails, or the frame is refused), never silently.
//
// Sharing: a process maps a peer's segment and slots on its first direct
// write to it, asking the peer for the memory over the shared-memory
// transport's authenticated socket (transport.MemorySharer: the memfd
// travels as SCM_RIGHTS, like the rings; no right to trace the peer is
// needed). The owner answers only processes of its current view that hold
// a rank, and records whom it gave each segment's memory and slots to.
// Every memfd is sealed against shrinking, and the receiver checks the
// seal and the size before it maps one.
//
// Fencing (docs/design.md §3): the owner raises the epoch of its slots'
// memory before anything of its sees a newer view (raiseEpochs). From then
// on a slot set in an older epoch reads as not set, a copy of an older
// epoch is not admitted (segments.PeerNotes.Enter), and an older epoch's
// fence fails. At Recover the owner waits for the copies it admitted
// before (drainWriters), and moves the segment's memory to a fresh memfd
// (segments.MemfdBacking.Renew) when a process it gave that memory to
// failed: a failed process stopped in the middle of a copy, resumed
// later, copies into memory no survivor uses. SegmentCreate, which every
// rank calls again after a recovery, exchanges the fresh generations, and
// a peer maps the memory again on its next direct write.
//
// The mechanics (the peers' memory of a segment, mapped on first use, its
// retirement; the decision "memory or frame?" and the copy) are package
// pgas/internal/samehost's; this file and directnote.go are the runtime's
// side: what it answers peers, when it maps and drops, and Recover's
// steps.

// directOn reports whether segments are shared with same-host peers: the
// transport must tell which peers are near and pass memory to them.
func (rt *Runtime) directOn() bool {
	if !rt.cfg.DirectShm {
		return false
	}
	_, ok := rt.tr.(transport.Locality)
	_, shares := rt.tr.(transport.MemorySharer)
	return ok && shares
}

// sharedDesc is what SegmentCreate's exchange carries for si
// (samehost.Desc).
func sharedDesc(si *segInfo) []int64 {
	notes := 0
	if si.seg.SharedNotes() {
		notes = si.seg.NumNotifications()
	}
	return samehost.Desc(si.seg.Size(), si.backing != nil, notes, si.gen.Load())
}

// provideMemory answers a peer's request for the memory of segment key
// (transport.MemoryFunc), or for its notification area
// (key|samehost.NotesKey), or for a collective area (samehost.CollKind):
// only a process that holds a rank in the current view, not declared
// failed, gets it, and the segment records it as a holder of the memory
// (renewShared) or as a writer with its line (drainWriters). The view is
// read under viewMu, so a view that declares the process failed has
// either refused it here or finds it recorded.
func (rt *Runtime) provideMemory(from transport.Proc, key uint64) (int, uint64, error) {
	if key&samehost.CollKind != 0 {
		if !rt.directOn() {
			return -1, 0, fmt.Errorf("pgas: no collective areas here: %w", ErrNoSegment)
		}
		rt.viewMu.Lock()
		defer rt.viewMu.Unlock()
		v := rt.view.Load()
		if err := holdsRank(v, from); err != nil {
			return -1, 0, err
		}
		return rt.provideArea(key, v.epoch)
	}
	if key&^samehost.NotesKey > 0xffff {
		return -1, 0, fmt.Errorf("pgas: no segment %d: %w", key, ErrNoSegment)
	}
	si, unpin, err := rt.pinSegInfo(uint16(key))
	if err != nil {
		return -1, 0, err
	}
	defer unpin()
	if si.backing == nil {
		return -1, 0, fmt.Errorf("pgas: segment %d is not shared: %w", uint16(key), ErrNoSegment)
	}
	// Under move: a Recover that renews the memory waits for this to
	// record the holder, and one that ran before is seen in the view.
	si.move.RLock()
	defer si.move.RUnlock()
	rt.viewMu.Lock()
	defer rt.viewMu.Unlock()
	if err := holdsRank(rt.view.Load(), from); err != nil {
		return -1, 0, err
	}
	si.hmu.Lock()
	defer si.hmu.Unlock()
	if key&samehost.NotesKey != 0 {
		return si.provideNotes(from)
	}
	fd, err := si.backing.Dup(si.seg.Bytes())
	if err != nil {
		return -1, 0, err
	}
	if si.holders == nil {
		si.holders = map[transport.Proc]bool{}
	}
	si.holders[from] = true
	return fd, uint64(si.gen.Load()), nil
}

// provideNotes gives process from the segment's notification area and a
// writer line of its own: the answer's tag carries the generation (low
// half) and the line (high half). The caller holds hmu.
func (si *segInfo) provideNotes(from transport.Proc) (int, uint64, error) {
	line, ok := si.writers[from]
	if !ok {
		line = len(si.writers)
		if line >= segments.MaxWriters {
			return -1, 0, fmt.Errorf("pgas: segment %d: %d processes were given its notification area already: %w", si.seg.ID(), line, ErrNoSegment)
		}
	}
	fd, err := si.seg.DupNotes()
	if err != nil {
		return -1, 0, err
	}
	if si.writers == nil {
		si.writers = map[transport.Proc]int{}
	}
	si.writers[from] = line
	return fd, uint64(si.gen.Load()) | uint64(line)<<32, nil
}

// holdsRank is provideMemory's test: only a process that holds a rank in
// view v, not declared failed, is given memory.
func holdsRank(v *view, from transport.Proc) error {
	if int(from) >= len(v.rankOf) || v.rankOf[from] < 0 || v.failed[from] {
		return fmt.Errorf("pgas: proc %d holds no rank in epoch %d: %w", from, v.epoch, ErrStaleEpoch)
	}
	return nil
}

// mapPeers records where the segments of this host's peers in view v
// are, from the descriptors exchanged (descs, samehost.DescWords per
// member of members); mappedPeer maps one on its first write to it. A
// peer whose memory cannot be mapped is written through frames.
func (rt *Runtime) mapPeers(si *segInfo, v *view, members []int, descs []int64) {
	rt.dropDirect(si)
	if si.backing == nil {
		return
	}
	si.direct.Store(samehost.NewSeg(v.epoch, v.rankOf, members, descs))
}

// mapPeer maps proc's memory of segment si into d, once (samehost.Seg.Map):
// on failure writes to proc go through frames.
func (rt *Runtime) mapPeer(si *segInfo, d *samehost.Seg, proc transport.Proc) {
	near := proc != rt.self && rt.tr.(transport.Locality).IsNear(proc)
	d.Map(proc, near, func(ps samehost.Share) samehost.Mem {
		m, notesErr, err := samehost.Fetch(rt.life, rt.tr.(transport.MemorySharer), proc, uint16(si.seg.ID()), ps)
		if err != nil {
			// Correct either way, only slower: said once, as information.
			if rt.mapRefused.CompareAndSwap(false, true) {
				rt.log.Info("a same-host peer's segment could not be mapped: writes to it go through the ring (set PGAS_SHM_SEGMENTS=0 to stop trying)",
					"seg", si.seg.ID(), "proc", proc, "err", err)
			} else {
				rt.log.Debug("segment not mapped", "seg", si.seg.ID(), "proc", proc, "err", err)
			}
		}
		if notesErr != nil {
			rt.log.Debug("notification area not mapped", "seg", si.seg.ID(), "proc", proc, "err", notesErr)
		}
		return m
	})
}

// dropDirect unmaps the others' segments. It retires them under every
// queue's lock first, so that no operation done through a queue's last
// target (postMem) is still copying.
func (rt *Runtime) dropDirect(si *segInfo) {
	d := si.direct.Swap(nil)
	if d == nil {
		return
	}
	for _, qu := range rt.queues {
		qu.mu.Lock()
	}
	d.Retire()
	for _, qu := range rt.queues {
		if qu.mem.Seg == d {
			qu.mem = memTarget{}
		}
		qu.mu.Unlock()
	}
	d.Unmap()
}

// mustMove reports whether view v declares failed a process that si gave
// its memory to (provideMemory), and forgets those processes: the memory
// it renews to has no holder yet.
func (si *segInfo) mustMove(v *view) bool {
	si.hmu.Lock()
	defer si.hmu.Unlock()
	return anyFailed(si.holders, v)
}

// anyFailed reports whether v declares failed one of holders, and then
// forgets them all. The caller holds hmu.
func anyFailed(holders map[transport.Proc]bool, v *view) bool {
	for p := range holders {
		if int(p) < len(v.failed) && v.failed[p] {
			clear(holders)
			return true
		}
	}
	return false
}

// drainWriters waits until no copy into a local segment that a same-host
// process started in an epoch older than the current view's is under way: Enter admitted
// it before this process raised its epoch (raiseEpochs), and it must land
// before the program restores its state, never after (as drainLanding
// for frames). Processes v declares failed, or whose connection is gone,
// are not waited for: a dead one copies nothing more, and renewShared
// moves a failed one's memory away. The others are live survivors
// finishing one copy (Enter refuses them any next one), so the wait is
// short.
func (rt *Runtime) drainWriters(ctx context.Context) error {
	rt.segMu.RLock()
	sis := make([]*segInfo, 0, len(rt.segs))
	for _, si := range rt.segs {
		if si.backing != nil {
			sis = append(sis, si)
		}
	}
	rt.segMu.RUnlock()
	for _, si := range sis {
		for {
			// A writer's announcement may be a plain store (EnterQueue):
			// the barrier orders it against the epochs raised before,
			// the last view's included.
			if err := segments.SyncWriters(); err != nil {
				return fmt.Errorf("pgas: recover: a memory barrier across this host's processes failed (set PGAS_SHM_SEGMENTS=0 to write through frames): %w", err)
			}
			busy := si.busyWriter(rt.view.Load(), rt.peers.isDown) // the latest: failures add up
			if busy == transport.NoProc {
				break
			}
			t := time.NewTimer(50 * time.Microsecond) // rare and short: poll
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("pgas: recover: proc %d is still copying into segment %d in an older epoch: %w", busy, si.seg.ID(), ctxError(ctx, "recover"))
			case <-rt.closed:
				t.Stop()
				return ErrClosed
			}
		}
	}
	return nil
}

// busyWriter returns a process that may still copy into si (see
// drainWriters), or NoProc.
func (si *segInfo) busyWriter(v *view, down func(transport.Proc) bool) transport.Proc {
	si.hmu.Lock()
	defer si.hmu.Unlock()
	for p, line := range si.writers {
		if (int(p) < len(v.failed) && v.failed[p]) || down(p) {
			continue
		}
		if si.seg.WriterBusy(line) {
			return p
		}
	}
	return transport.NoProc
}

// renewShared unmaps the others' segments and moves to fresh memory each
// shared segment that a process v declares failed had been given (see the
// comment at the top). Recover calls it before the program enters the new
// epoch; no frame is landing then (drainLanding), and the program does not
// use segment memory while it recovers.
func (rt *Runtime) renewShared(v *view) error {
	rt.segMu.RLock()
	sis := make([]*segInfo, 0, len(rt.segs))
	for _, si := range rt.segs {
		sis = append(sis, si)
	}
	rt.segMu.RUnlock()
	for _, si := range sis {
		rt.dropDirect(si)
		if si.backing == nil {
			continue
		}
		si.use.RLock() // against SegmentDelete; read replies may go on (see segInfo.move)
		si.move.Lock()
		var err error
		if !si.deleted && si.mustMove(v) {
			err = si.backing.Renew(si.seg.Bytes())
			si.gen.Store(rt.segGen.Add(1))
		}
		si.move.Unlock()
		si.use.RUnlock()
		if err != nil {
			return fmt.Errorf("pgas: recover: move segment %d to fresh shared memory: %w", si.seg.ID(), err)
		}
	}
	return nil
}
