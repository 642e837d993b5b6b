package pgas

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"sync"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Direct writes (Config.DirectShm): a segment lives in a memfd, and the
// processes of one host map each other's segments, so that a Write to a
// rank on this host is a copy into its memory followed by a doorbell: the
// same sequenced FrameWrite as before, without its payload, through the
// same transport. The target applies the doorbell like any write of no
// bytes: it admits it only from a process of its view in its epoch, then
// sets the notification (WriteNotify) and acknowledges it. So:
//
//   - the notification is set after the data is visible (the copy is done
//     before the doorbell is sent, and the target reads the doorbell);
//   - Wait means remote completion: the ack says the target was in the
//     writer's epoch when the doorbell arrived, hence (see Recover) that
//     the copy landed in the memory it uses;
//   - a write that raced a view change fails as over the network (the
//     doorbell is refused), never silently.
//
// Sharing: a process maps a peer's segment on its first direct write to
// it, asking the peer for the memory over the shared-memory transport's
// authenticated socket (transport.MemorySharer: the memfd travels as
// SCM_RIGHTS, like the rings; no right to trace the peer is needed). The
// owner answers only processes of its current view that hold a rank, and
// records whom it gave each segment's memory to.
//
// Fencing: at Recover a process moves a shared segment to a fresh memfd at
// the same address (segments.MemfdBacking.Renew) when the new view
// declares failed a process it gave that memory to (no other process can
// map it), and unmaps the others' segments everywhere; SegmentCreate,
// which every rank calls again after a recovery, exchanges the fresh
// generations, and a peer maps the memory again on its next direct write.
// A replaced process that resumes still maps the old memory, which no
// survivor uses any more: its copies change nothing, and its doorbells
// carry its old epoch and generation and are refused.

// directSeg is what a shared segment knows of the others' memory in one
// view: where each same-host peer's is (from SegmentCreate's exchange),
// and the mappings made so far. A peer's memory is mapped on the first
// write to it, so a process maps only the peers it writes to (its
// checkpoint mirrors, its partners), not the whole host: at 256
// processes mapping everyone's took a second per segment and process.
type directSeg struct {
	mu      sync.RWMutex               // held shared while copying into mem; exclusively to map or unmap
	epoch   uint32                     // the view the descriptors were exchanged in
	dropped bool                       // unmapped (dropDirect): map nothing more
	view    *view                      // the view of the exchange
	members []int                      // the ranks that sent descs, ascending
	descs   []int64                    // descWords per member: read on a peer's first write, not before
	mem     map[transport.Proc]peerMem // mapped, or a nil mem when mapping failed
	// fetching holds, for each peer whose memory is being asked for, a
	// channel closed when the answer is in mem (mapPeer).
	fetching map[transport.Proc]chan struct{}
}

// share returns where proc's memory is, if it sent any and is on this
// host.
func (d *directSeg) share(rt *Runtime, proc transport.Proc) (peerShare, bool) {
	if proc == rt.self || int(proc) >= len(d.view.rankOf) || !rt.tr.(transport.Locality).IsNear(proc) {
		return peerShare{}, false
	}
	r := d.view.rankOf[proc]
	if r < 0 {
		return peerShare{}, false
	}
	i := slices.Index(d.members, r)
	if i < 0 {
		return peerShare{}, false
	}
	desc := d.descs[descWords*i : descWords*(i+1)]
	if desc[1] <= 0 {
		return peerShare{}, false
	}
	return peerShare{size: desc[0], gen: uint32(desc[4])}, true
}

// peerShare is what sharedDesc sent of a peer's segment memory.
type peerShare struct {
	size int64
	gen  uint32
}

// peerMem is a peer's segment memory mapped here, and its generation
// (segInfo.gen at the peer).
type peerMem struct {
	mem []byte
	gen uint32
}

// descWords is the length of sharedDesc.
const descWords = 5

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

// sharedDesc is what SegmentCreate's exchange carries for one rank: the
// size, whether its memory can be shared (1) or not (0), two words
// unused, and its generation.
func sharedDesc(si *segInfo) []int64 {
	d := []int64{si.seg.Size(), 0, 0, 0, int64(si.gen.Load())}
	if si.backing != nil {
		d[1] = 1
	}
	return d
}

// shareTimeout bounds a request for a peer's memory; past it the write
// goes through the ring.
const shareTimeout = 10 * time.Second

// provideMemory answers a peer's request for the memory of segment key
// (transport.MemoryFunc): only a process that holds a rank in the current
// view, not declared failed, gets it, and the segment records it as a
// holder of that memory (renewShared).
func (rt *Runtime) provideMemory(from transport.Proc, key uint64) (int, uint64, error) {
	if key > 0xffff {
		return -1, 0, fmt.Errorf("pgas: no segment %d: %w", key, ErrNoSegment)
	}
	si, unpin, err := rt.pinSegInfo(uint16(key))
	if err != nil {
		return -1, 0, err
	}
	defer unpin()
	if si.backing == nil {
		return -1, 0, fmt.Errorf("pgas: segment %d is not shared: %w", key, ErrNoSegment)
	}
	// Under move: a Recover that renews the memory waits for this to
	// record the holder, and one that ran before is seen in the view.
	si.move.RLock()
	defer si.move.RUnlock()
	v := rt.view.Load()
	if int(from) >= len(v.rankOf) || v.rankOf[from] < 0 || v.failed[from] {
		return -1, 0, fmt.Errorf("pgas: proc %d holds no rank in epoch %d: %w", from, v.epoch, ErrStaleEpoch)
	}
	fd, err := si.backing.Dup(si.seg.Bytes())
	if err != nil {
		return -1, 0, err
	}
	si.hmu.Lock()
	if si.holders == nil {
		si.holders = map[transport.Proc]bool{}
	}
	si.holders[from] = true
	si.hmu.Unlock()
	return fd, uint64(si.gen.Load()), nil
}

// mapPeers records where the segments of this host's peers in view v
// are, from the descriptors exchanged (descs, descWords per member of
// members); copyDirect maps one on its first write to it. A peer whose
// memory cannot be mapped is written through frames.
func (rt *Runtime) mapPeers(si *segInfo, v *view, members []int, descs []int64) {
	si.dropDirect()
	if si.backing == nil {
		return
	}
	d := &directSeg{epoch: v.epoch, view: v, members: members, descs: descs, mem: map[transport.Proc]peerMem{}}
	si.dmu.Lock()
	si.direct = d
	si.dmu.Unlock()
}

// mapPeer maps proc's memory of segment si into d, once: on failure it
// records a nil mapping, and writes to proc go through frames. The
// request for the memory is a round trip to proc, made without d.mu, so
// that writes to the other peers go on meanwhile (a stopped peer holds it
// up to shareTimeout); a writer to proc itself waits for it, so that its
// writes keep their order (none goes by frame while an earlier one went
// direct, or the other way round).
func (rt *Runtime) mapPeer(si *segInfo, d *directSeg, proc transport.Proc) {
	d.mu.Lock()
	if _, done := d.mem[proc]; done || d.dropped {
		d.mu.Unlock()
		return
	}
	if wait, ok := d.fetching[proc]; ok {
		d.mu.Unlock()
		<-wait
		return
	}
	ps, ok := d.share(rt, proc)
	if !ok {
		d.mem[proc] = peerMem{}
		d.mu.Unlock()
		return
	}
	done := make(chan struct{})
	if d.fetching == nil {
		d.fetching = map[transport.Proc]chan struct{}{}
	}
	d.fetching[proc] = done
	d.mu.Unlock()

	pm, err := rt.fetchPeer(si, proc, ps)
	if err != nil {
		// Correct either way, only slower: said once, as information.
		if rt.mapRefused.CompareAndSwap(false, true) {
			rt.log.Info("a same-host peer's segment could not be mapped: writes to it go through the ring (set PGAS_SHM_SEGMENTS=0 to stop trying)",
				"seg", si.seg.ID(), "proc", proc, "err", err)
		} else {
			rt.log.Debug("segment not mapped", "seg", si.seg.ID(), "proc", proc, "err", err)
		}
	}
	d.mu.Lock()
	if d.dropped && pm.mem != nil {
		segments.UnmapShared(pm.mem) // dropDirect ran meanwhile
		pm = peerMem{}
	}
	if !d.dropped {
		d.mem[proc] = pm
	}
	delete(d.fetching, proc)
	close(done)
	d.mu.Unlock()
}

// fetchPeer asks proc for its memory of segment si and maps it; ps is what
// the exchange said of it.
func (rt *Runtime) fetchPeer(si *segInfo, proc transport.Proc, ps peerShare) (peerMem, error) {
	ctx, cancel := context.WithTimeout(rt.life, shareTimeout)
	fd, tag, err := rt.tr.(transport.MemorySharer).FetchMemory(ctx, proc, uint64(si.seg.ID()))
	cancel()
	if err != nil {
		return peerMem{}, err
	}
	defer unix.Close(fd)
	// The memory must be the segment the exchange described: a peer that
	// deleted and re-created it since has another generation (and maybe
	// another size that rounds to the same pages).
	if uint32(tag) != ps.gen {
		return peerMem{}, fmt.Errorf("segment %d of proc %d is of generation %d now, the exchange said %d", si.seg.ID(), proc, uint32(tag), ps.gen)
	}
	mem, err := segments.MapFD(fd, ps.size)
	if err != nil {
		return peerMem{}, err
	}
	return peerMem{mem: mem, gen: uint32(tag)}, nil
}

// dropDirect unmaps the others' segments.
func (si *segInfo) dropDirect() {
	si.dmu.Lock()
	d := si.direct
	si.direct = nil
	si.dmu.Unlock()
	if d == nil {
		return
	}
	d.mu.Lock()
	d.dropped = true
	for p, pm := range d.mem {
		if pm.mem != nil {
			segments.UnmapShared(pm.mem)
		}
		delete(d.mem, p)
	}
	d.mu.Unlock()
}

// copyDirect copies payload into proc's segment seg at off when this
// process maps it in the current view's epoch, and reports whether it did
// and the generation of the memory it copied into.
func (rt *Runtime) copyDirect(seg uint16, proc transport.Proc, off uint64, payload []byte) (gen uint32, ok bool) {
	rt.segMu.RLock()
	si := rt.segs[segments.ID(seg)]
	rt.segMu.RUnlock()
	if si == nil {
		return 0, false
	}
	si.dmu.RLock()
	d := si.direct
	si.dmu.RUnlock()
	if d == nil || d.epoch != rt.view.Load().epoch {
		return 0, false
	}
	d.mu.RLock()
	pm, ok := d.mem[proc]
	if !ok {
		d.mu.RUnlock()
		rt.mapPeer(si, d, proc)
		d.mu.RLock()
		pm, ok = d.mem[proc]
	}
	defer d.mu.RUnlock()
	if !ok || pm.mem == nil || segments.Retired(pm.mem) {
		return 0, false // the target deleted or moved it: send the data
	}
	if off > uint64(len(pm.mem)) || uint64(len(payload)) > uint64(len(pm.mem))-off {
		return 0, false // the target checks the range and refuses it
	}
	copy(pm.mem[off:], payload)
	rt.stats.DirectWrites.Add(1)
	return pm.gen, true
}

// doorbell turns h, a write of n bytes just copied into memory of
// generation gen, into its doorbell (transport.FlagDirect).
func doorbell(h *transport.Header, n int, gen uint32) {
	h.Flags |= transport.FlagDirect
	h.A |= uint64(n) << 16
	h.B |= uint64(gen) << 32
}

// checkDoorbell checks a doorbell against the segment it names, pinned,
// and turns h back into a write of no bytes with its notification.
func checkDoorbell(si *segInfo, h *transport.Header) error {
	n, gen := h.A>>16, uint32(h.B>>32)
	h.A, h.B = h.A&0xffff, h.B&0xffffffff
	if err := si.seg.Check(int64(h.Off), int64(n)); err != nil || h.Off > 1<<62 {
		return fmt.Errorf("%w: %v", ErrBounds, err)
	}
	if gen != si.gen.Load() {
		return fmt.Errorf("segment %d: the data went to memory the segment no longer uses: %w", si.seg.ID(), ErrNoSegment)
	}
	return nil
}

// mustMove reports whether view v declares failed a process that si gave
// its memory to (provideMemory), and forgets those processes: the memory
// it renews to has no holder yet.
func (si *segInfo) mustMove(v *view) bool {
	si.hmu.Lock()
	defer si.hmu.Unlock()
	must := false
	for p := range si.holders {
		if int(p) < len(v.failed) && v.failed[p] {
			must = true
		}
	}
	if must {
		clear(si.holders)
	}
	return must
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
		si.dropDirect()
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
