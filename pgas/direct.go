package pgas

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"sync"
	"sync/atomic"

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
	gone    atomic.Bool                // retired (dropDirect): postMem uses it no more
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
	return peerShare{size: desc[0], notes: int(desc[2]), gen: uint32(desc[4])}, true
}

// peerShare is what sharedDesc sent of a peer's segment memory.
type peerShare struct {
	size  int64
	notes int // slots in its notification area, 0 when not shared
	gen   uint32
}

// peerMem is a peer's segment memory mapped here, its generation
// (segInfo.gen at the peer), and its notification area when that is
// mapped too (directnote.go).
type peerMem struct {
	mem   []byte
	gen   uint32
	notes *segments.PeerNotes
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
// size, whether its memory can be shared (1) or not (0), the number of
// slots of its shared notification area (0 for none), a word unused, and
// its generation.
func sharedDesc(si *segInfo) []int64 {
	d := []int64{si.seg.Size(), 0, 0, 0, int64(si.gen.Load())}
	if si.backing != nil {
		d[1] = 1
	}
	if si.seg.SharedNotes() {
		d[2] = int64(si.seg.NumNotifications())
	}
	return d
}

// notesKey is the bit of a memory request's key that asks for the
// segment's notification area instead of its memory.
const notesKey = 1 << 16

// shareTimeout bounds a request for a peer's memory; past it the write
// goes through the ring.
const shareTimeout = 10 * time.Second

// provideMemory answers a peer's request for the memory of segment key
// (transport.MemoryFunc), or for its notification area (key|notesKey):
// only a process that holds a rank in the current view, not declared
// failed, gets it, and the segment records it as a holder of the memory
// (renewShared) or as a writer with its line (drainWriters). The view is
// read under viewMu, so a view that declares the process failed has
// either refused it here or finds it recorded.
func (rt *Runtime) provideMemory(from transport.Proc, key uint64) (int, uint64, error) {
	if key&collKind != 0 {
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
	if key&^notesKey > 0xffff {
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
	if key&notesKey != 0 {
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
// are, from the descriptors exchanged (descs, descWords per member of
// members); mappedPeer maps one on its first write to it. A peer whose
// memory cannot be mapped is written through frames.
func (rt *Runtime) mapPeers(si *segInfo, v *view, members []int, descs []int64) {
	rt.dropDirect(si)
	if si.backing == nil {
		return
	}
	d := &directSeg{epoch: v.epoch, view: v, members: members, descs: descs, mem: map[transport.Proc]peerMem{}}
	si.direct.Store(d)
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
		pm.unmap() // dropDirect ran meanwhile
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
	pm := peerMem{mem: mem, gen: uint32(tag)}
	if ps.notes > 0 {
		// Without the area, writes still copy directly; notifications and
		// completion go by doorbell.
		pm.notes, err = rt.fetchNotes(si, proc, ps)
		if err != nil {
			rt.log.Debug("notification area not mapped", "seg", si.seg.ID(), "proc", proc, "err", err)
		}
	}
	return pm, nil
}

// fetchNotes asks proc for the notification area of segment si and maps
// it.
func (rt *Runtime) fetchNotes(si *segInfo, proc transport.Proc, ps peerShare) (*segments.PeerNotes, error) {
	ctx, cancel := context.WithTimeout(rt.life, shareTimeout)
	fd, tag, err := rt.tr.(transport.MemorySharer).FetchMemory(ctx, proc, uint64(si.seg.ID())|notesKey)
	cancel()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if uint32(tag) != ps.gen {
		return nil, fmt.Errorf("segment %d of proc %d is of generation %d now, the exchange said %d", si.seg.ID(), proc, uint32(tag), ps.gen)
	}
	return segments.MapNotes(fd, ps.notes, int(tag>>32))
}

// unmap releases what fetchPeer mapped.
func (pm peerMem) unmap() {
	if pm.mem != nil {
		segments.UnmapShared(pm.mem)
	}
	if pm.notes != nil {
		pm.notes.Unmap()
	}
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
	d.gone.Store(true)
	for _, qu := range rt.queues {
		if qu.mem.d == d {
			qu.mem = memTarget{}
		}
		qu.mu.Unlock()
	}
	d.mu.Lock()
	d.dropped = true
	for p, pm := range d.mem {
		pm.unmap()
		delete(d.mem, p)
	}
	d.mu.Unlock()
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
