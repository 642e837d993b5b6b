package ckpt

import (
	"context"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// pair identifies one rank's snapshot: the checkpoint id and the timeline
// generation it was taken in. Ids repeat after a rollback (the program
// redoes iterations); generations never do, so a pair names one snapshot.
type pair struct{ id, gen uint64 }

// heldCopy is a verified mirror slot: the snapshot of src held at
// (position, slot) of a holder's mirror segment.
type heldCopy struct {
	src       int
	p         pair
	pos, slot int
}

// entry is one rank's contribution to the restore inventory.
type entry struct {
	vacant   bool // a rank of a job that shrank: no process, no entry
	rank     int
	gen      uint64
	mirrorID int // -1: none (a fresh spare)
	capacity int
	local    [2]*pair // complete local snapshot buffers
	copies   []heldCopy
}

// readChunk is the most one fetch Read asks for (pgas caps one read at
// the transport's frame limit, 64 MiB). A variable so that tests can
// exercise many reads.
var readChunk int64 = 16 << 20

// Restore brings every rank back to the newest checkpoint that every rank
// can restore, and returns its id. It is collective: after a failure all
// ranks call it, survivors after pgas Recover and a promoted spare after
// its Init and New. It
//
//  1. stops this rank's pushes and drains its queue;
//  2. exchanges an inventory: each rank's complete local snapshots and
//     the mirror slots it holds whose checksums verify;
//  3. picks the target: the snapshot (id, generation) that every rank has,
//     locally or at a live holder, with the highest id. Survivors restore
//     from their local copy; a rank without one (a promoted spare) reads
//     its snapshot from a holder with one-sided Reads and checks its CRC;
//  4. re-creates the mirror segments for the current placement, agrees
//     that every rank succeeded, then copies the snapshot into the
//     registered regions;
//  5. starts a background rebuild: each rank re-pushes its snapshot to
//     those of its holders that lack it (the new process, or all of them
//     when the placement moved). WaitProtected waits for it; the window
//     without protection is logged and kept in Stats.
//
// Why not "the minimum over ranks of the last committed id": a commit's
// agreement can complete on some ranks and fail on others, so survivors
// may disagree by one; a rank that committed n may already have reused
// the buffer of n-1 for Start(n+1), and the minimum would then name a
// snapshot that no longer exists. The newest snapshot every rank holds is
// never older than the newest committed one (a committed snapshot is on
// every rank and its holders, and a buffer is reused only after a newer
// commit), it may be newer when the last agreement failed after all pushes
// succeeded, and it is always a consistent cut because every rank
// contributes the same id of the same generation. A fresh spare contributes
// nothing, so it constrains nothing beyond "its snapshot must be at a
// holder".
//
// It returns ErrNoCheckpoint (with the segments set up, so Start may
// follow) when nothing is restorable, ErrRestoreFailed when some rank
// could not restore the agreed snapshot, and pgas errors
// (pgas.NeedsRecovery) when the membership changed again: Recover and call
// Restore again.
func (c *Checkpointer) Restore(ctx context.Context) (uint64, error) {
	done := restoreSpan()
	id, err := c.recoverFrom(ctx, "")
	done(id, err)
	return id, err
}

// choice is what this rank restores: a pair in local buffer buf, whose
// header has been checked against the registered regions.
type choice struct {
	p   pair
	buf int
	hdr Header
}

func (c *Checkpointer) recoverFrom(ctx context.Context, dir string) (uint64, error) {
	op := "restore"
	if dir != "" {
		op = "load from disk"
	}
	start := time.Now()
	if c.closed.Load() {
		return 0, ErrClosed
	}
	laps := newLaps(start)
	if err := c.quiesce(ctx); err != nil {
		return 0, fmt.Errorf("ckpt: %s: %w", op, err)
	}
	laps.lap("quiesce")
	if err := c.createLocal(ctx); err != nil {
		return 0, fmt.Errorf("ckpt: %s: %w", op, err)
	}
	laps.lap("local")
	c.mu.Lock()
	n, me, committed := c.n, c.rank, c.committed
	c.mu.Unlock()
	live := c.rt.LiveRanks()
	if len(live) < n && (dir != "" || c.cfg.Dir != "") {
		// Every disk checkpoint has one file per rank, and its manifest
		// is written once every rank reported one.
		return 0, fmt.Errorf("ckpt: %s: the disk level needs every rank, and ranks %v of %d are vacant (the job shrank): turn off Config.Dir for a job that shrinks: %w", op, vacantOf(live, n), n, ErrInvalid)
	}
	mine, err := c.myEntry()
	if err != nil {
		return 0, fmt.Errorf("ckpt: %s: inventory: %w", op, err)
	}
	lay := newLayout(c.hosts(), c.cfg.Mirrors, live)
	ag, hs, err := c.agree(ctx, mine, live, lay)
	if err != nil {
		return 0, fmt.Errorf("ckpt: %s: inventory: %w", op, err)
	}
	laps.lap("inventory")

	// Pick and prepare the snapshot.
	var ch *choice
	var cerr error // why this rank cannot restore the agreed snapshot
	var diag error // disk level: why this rank's newer checkpoints were refused
	pl := planRestore(me, n, mine.local, hs, ag.common, committed)
	newGen := ag.maxGen
	found := false
	if dir == "" {
		found = pl.found
		if found {
			ch, cerr = c.prepareFromMemory(ctx, pl)
		}
	} else {
		var derr error
		ch, found, diag, derr = c.prepareFromDisk(ctx, dir)
		if derr != nil {
			return 0, fmt.Errorf("ckpt: %s: %w", op, derr)
		}
		if found {
			newGen = max(newGen, ch.p.gen)
		}
	}
	newGen++
	laps.lap("prepare")

	// Mirror segments for the current placement.
	mid, err := c.setupMirror(ctx, ag, lay)
	if err != nil {
		return 0, fmt.Errorf("ckpt: %s: %w", op, err)
	}
	laps.lap("mirror")

	// Everyone restored?
	vals := []uint64{1, math.MaxUint64}
	if found && cerr != nil {
		vals[0], vals[1] = 0, uint64(me)
	}
	if err := pgas.Allreduce(ctx, c.rt, nil, vals, pgas.OpMin); err != nil {
		return 0, fmt.Errorf("ckpt: %s: final agreement: %w", op, err)
	}
	laps.lap("agreement")

	c.mu.Lock()
	oldMirror, hadMirror := c.mirrorID, c.ready
	c.lay, c.mirrorID, c.mirrorCap, c.ready = lay, mid, lay.capacity(me), true
	c.gen = newGen
	c.pending, c.needsRestore = nil, false
	c.mu.Unlock()
	if hadMirror && oldMirror != mid {
		c.rt.SegmentDelete(oldMirror)
	}
	c.startManifester()

	if !found {
		c.mu.Lock()
		c.committed, c.hasStarted = -1, false
		c.bufs[0].valid, c.bufs[1].valid = false, false
		c.mu.Unlock()
		if dir != "" {
			if diag != nil {
				return 0, fmt.Errorf("ckpt: %s %s: no complete checkpoint that every rank can read (this rank: %v): %w", op, dir, diag, ErrNoCheckpoint)
			}
			return 0, fmt.Errorf("ckpt: %s %s: no complete checkpoint that every rank can read: %w", op, dir, ErrNoCheckpoint)
		}
		return 0, fmt.Errorf("ckpt: %s: no checkpoint is held for every rank (none committed yet, or more failures than %d mirror(s) cover; try the disk level): %w", op, c.cfg.Mirrors, ErrNoCheckpoint)
	}
	if vals[0] == 0 {
		c.mu.Lock()
		c.needsRestore = true // nothing consistent to checkpoint from
		c.mu.Unlock()
		if cerr != nil {
			return 0, fmt.Errorf("ckpt: %s of checkpoint %d: %w: %w", op, ch.p.id, ErrRestoreFailed, cerr)
		}
		return 0, fmt.Errorf("ckpt: %s: %w on rank %d", op, ErrRestoreFailed, vals[1])
	}

	// Apply: the regions, then the committed state.
	if err := c.copyOut(ch); err != nil {
		// Checked before the agreement; only a region that changed since
		// can fail here.
		return 0, fmt.Errorf("ckpt: %s of checkpoint %d: %w", op, ch.p.id, err)
	}
	if c.cfg.Dir != "" && me == 0 {
		// Directories above the restored id belong to the abandoned
		// timeline (never completed); the new one will reuse their names.
		c.pruneAbove(c.cfg.Dir, ch.p.id)
	}
	var ts []target
	for _, s := range rebuildPositions(hs, lay, int(mid), me, ch.p, ch.buf) {
		ts = append(ts, target{rank: s.holder, off: c.slotOff(s.pos, s.slot)})
	}
	c.mu.Lock()
	c.committed, c.lastCommit = ch.buf, ch.p.id
	c.lastStarted, c.hasStarted = ch.p.id, true
	c.bufs[1-ch.buf].valid = false
	since := start
	if !c.failureAt.IsZero() {
		since = c.failureAt
	}
	c.failureAt = time.Time{}
	c.diskRestoredLocked(ch.p.id, newGen)
	c.st.Restores++
	var window time.Duration
	if len(ts) > 0 {
		c.rebuild = c.enqueueLocked(jobRebuild, ch.p.id, ch.buf, ts, since)
	} else {
		c.rebuild = nil
		window = time.Since(since)
		c.recordWindowLocked(window)
	}
	c.signalLocked()
	c.mu.Unlock()
	c.log.Info("checkpoint restored", "rank", me, "id", ch.p.id, "gen", ch.p.gen, "from", restoredFrom(dir, ch, mine),
		"epoch", c.rt.Epoch(), "took", time.Since(start), "phases", laps, "rebuild_holders", len(ts))
	if len(ts) == 0 {
		c.log.Info("mirrors intact", "rank", me, "unprotected", window)
	}
	return ch.p.id, nil
}

func restoredFrom(dir string, ch *choice, mine entry) string {
	if dir != "" {
		return "disk"
	}
	if p := mine.local[ch.buf]; p != nil && *p == ch.p {
		return "local"
	}
	return "holder"
}

// quiesce cancels this rank's queued and running pushes, waits for the
// worker to go idle and drains Config.Queue.
func (c *Checkpointer) quiesce(ctx context.Context) error {
	c.mu.Lock()
	for _, j := range c.queue {
		j.cancel()
	}
	if c.cur != nil {
		c.cur.cancel()
	}
	c.mu.Unlock()
	if err := c.waitFor(ctx, "pushes to stop", func() bool { return c.outstanding == 0 }); err != nil {
		return err
	}
	// Operations a cancelled Wait left on the queue: they end with an ack,
	// or an error from a failed or newer-epoch peer. Either way they are
	// gone afterwards.
	if err := c.rt.Wait(ctx, c.cfg.Queue); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// vacantOf lists the ranks of 0..n-1 not in live.
func vacantOf(live []int, n int) []int {
	var vs []int
	for r := range n {
		if _, ok := slices.BinarySearch(live, r); !ok {
			vs = append(vs, r)
		}
	}
	return vs
}

// myEntry describes this rank's snapshots and verified mirror slots.
func (c *Checkpointer) myEntry() (entry, error) {
	c.mu.Lock()
	e := entry{rank: c.rank, gen: c.gen, mirrorID: -1}
	for b, s := range c.bufs {
		if s.valid {
			e.local[b] = &pair{s.id, s.gen}
		}
	}
	ready, mid, capacity := c.ready, c.mirrorID, c.mirrorCap
	c.mu.Unlock()
	if !ready {
		return e, nil
	}
	e.mirrorID, e.capacity = int(mid), capacity
	seg, err := c.rt.Segment(mid)
	if err != nil {
		return e, fmt.Errorf("ckpt: mirror segment %d: %w", mid, err)
	}
	mem := seg.Bytes()
	for pos := 0; pos < capacity; pos++ {
		for s := 0; s < 2; s++ {
			off := c.slotOff(pos, s)
			h, ok := c.checkSlot(mem[off : off+c.slot])
			if ok && int(h.NumRanks) == c.n {
				e.copies = append(e.copies, heldCopy{src: int(h.Rank), p: pair{h.ID, h.Gen}, pos: pos, slot: s})
			}
		}
	}
	return e, nil
}

// checkSlot decodes and verifies the snapshot in a slot or buffer.
func (c *Checkpointer) checkSlot(b []byte) (Header, bool) {
	h, err := DecodeHeader(b[:headerArea])
	if err != nil {
		return h, false
	}
	pl := h.PayloadLen()
	if pl > uint64(c.slot-headerArea) {
		return h, false
	}
	return h, crc32.Checksum(b[headerArea:headerArea+int64(pl)], castagnoli) == h.PayloadCRC
}

// prepareFromMemory carries out this rank's plan: it puts the planned
// snapshot in a local buffer, from this rank's own copy or from a holder,
// and checks it against the registered regions. Any error means this rank
// cannot restore it.
func (c *Checkpointer) prepareFromMemory(ctx context.Context, pl restorePlan) (*choice, error) {
	if pl.local >= 0 {
		ch := &choice{p: pl.target, buf: pl.local}
		return ch, c.verifyBuf(ch)
	}
	b := pl.into
	if err := c.waitFor(ctx, "the snapshot buffer", func() bool { return c.bufs[b].busy == 0 }); err != nil {
		return nil, err
	}
	c.mu.Lock()
	me := c.rank
	c.bufs[b].valid = false
	c.mu.Unlock()
	var errs []error
	for _, s := range pl.sources {
		ch := &choice{p: pl.target, buf: b}
		err := c.fetch(ctx, s.holder, segments.ID(s.mirror), c.slotOff(s.pos, s.slot), b)
		if err == nil {
			err = c.verifyBuf(ch)
		}
		if err == nil {
			c.mu.Lock()
			c.st.Fetched++
			c.mu.Unlock()
			return ch, nil
		}
		c.log.Warn("fetch from holder failed", "rank", me, "holder", s.holder, "id", pl.target.id, "err", err)
		errs = append(errs, fmt.Errorf("holder %d: %w", s.holder, err))
	}
	return nil, fmt.Errorf("ckpt: no holder delivered checkpoint %d of rank %d: %v", pl.target.id, me, errs)
}

// fetch reads a slot of holder's mirror segment into local buffer b.
func (c *Checkpointer) fetch(ctx context.Context, holder int, mirror segments.ID, off int64, b int) error {
	q := c.cfg.Queue
	dst := c.bufOff(b)
	if err := c.rt.Read(ctx, q, holder, pgas.Loc{Seg: mirror, Off: off}, pgas.Loc{Seg: c.local, Off: dst}, headerArea); err != nil {
		c.rt.Wait(ctx, q)
		return err
	}
	if err := c.rt.Wait(ctx, q); err != nil {
		return err
	}
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	h, err := DecodeHeader(seg.Bytes()[dst : dst+headerArea])
	if err != nil {
		return err
	}
	pl := int64(h.PayloadLen())
	if pl > c.slot-headerArea {
		return fmt.Errorf("ckpt: holder %d's slot declares %d payload bytes, above MaxBytes: %w", holder, pl, ErrCorrupt)
	}
	for done := int64(0); done < pl; {
		k := min(pl-done, readChunk)
		if err := c.rt.Read(ctx, q, holder, pgas.Loc{Seg: mirror, Off: off + headerArea + done}, pgas.Loc{Seg: c.local, Off: dst + headerArea + done}, k); err != nil {
			c.rt.Wait(ctx, q)
			return err
		}
		done += k
	}
	return c.rt.Wait(ctx, q)
}

// verifyBuf checks that local buffer ch.buf holds this rank's snapshot
// ch.p, intact, and that it fits the registered regions. On success it
// records the buffer as valid.
func (c *Checkpointer) verifyBuf(ch *choice) error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	off := c.bufOff(ch.buf)
	h, ok := c.checkSlot(seg.Bytes()[off : off+c.slot])
	if !ok {
		return fmt.Errorf("ckpt: snapshot in buffer %d fails its checks: %w", ch.buf, ErrCorrupt)
	}
	c.mu.Lock()
	me, n, regions := c.rank, c.n, slices.Clone(c.regions)
	c.mu.Unlock()
	if int(h.Rank) != me || int(h.NumRanks) != n || h.ID != ch.p.id || h.Gen != ch.p.gen {
		return fmt.Errorf("ckpt: snapshot is rank %d of %d, checkpoint %d gen %d; want rank %d of %d, checkpoint %d gen %d: %w",
			h.Rank, h.NumRanks, h.ID, h.Gen, me, n, ch.p.id, ch.p.gen, ErrCorrupt)
	}
	if err := c.checkLayout(&h, regions); err != nil {
		return err
	}
	ch.hdr = h
	c.mu.Lock()
	c.bufs[ch.buf] = bufState{valid: true, id: h.ID, gen: h.Gen, hdrLen: h.Len(), payloadLen: int64(h.PayloadLen()), busy: c.bufs[ch.buf].busy}
	c.mu.Unlock()
	return nil
}

// checkLayout compares a snapshot's regions with the registered ones.
func (c *Checkpointer) checkLayout(h *Header, regions []region) error {
	if len(h.Regions) != len(regions) {
		return fmt.Errorf("ckpt: snapshot has %d regions, %d are registered: %w", len(h.Regions), len(regions), ErrLayout)
	}
	for i, r := range regions {
		// A variable region (RegisterVar) holds a prefix of its length.
		if fits := h.Regions[i] == uint64(r.n) || (r.used != nil && h.Regions[i] < uint64(r.n)); !fits {
			return fmt.Errorf("ckpt: region %q: snapshot has %d bytes, %d are registered: %w", r.name, h.Regions[i], r.n, ErrLayout)
		}
		if _, err := c.resolve(r); err != nil {
			return err
		}
	}
	if lc := layoutCRC(regionNames(regions)); lc != h.LayoutCRC {
		return fmt.Errorf("ckpt: region names differ from the snapshot's (layout CRC %#08x, snapshot %#08x): %w", lc, h.LayoutCRC, ErrLayout)
	}
	return nil
}

// copyOut copies the snapshot in ch.buf into the registered regions.
func (c *Checkpointer) copyOut(ch *choice) error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	c.mu.Lock()
	regions := slices.Clone(c.regions)
	c.mu.Unlock()
	if err := c.checkLayout(&ch.hdr, regions); err != nil {
		return err
	}
	payload := seg.Bytes()[c.bufOff(ch.buf)+headerArea:]
	var off int64
	for i, r := range regions {
		dst, err := c.resolve(r)
		if err != nil {
			return err
		}
		l := int64(ch.hdr.Regions[i])
		copy(dst, payload[off:off+l])
		off += l
	}
	return nil
}

// setupMirror creates the mirror segment for layout lay. Survivors keep
// theirs when its size still fits (SegmentCreate is idempotent then); when
// some survivor's capacity changes, every rank moves to the other mirror
// ID, and the old segment is deleted after the final agreement (nobody
// reads it any more). ag says which mirror segment is in use and which
// ones still fit every rank.
func (c *Checkpointer) setupMirror(ctx context.Context, ag agreement, lay *layout) (segments.ID, error) {
	ids := c.mirrorIDs()
	first := 0
	if ag.cur == int(ids[1]) {
		first = 1
	}
	mid := ids[first]
	if !ag.fits[first] {
		mid = ids[1-first]
		if !ag.fits[1-first] {
			return 0, fmt.Errorf("ckpt: both mirror segments %d and %d are in use with sizes that do not fit the new placement: %w", ids[0], ids[1], ErrInvalid)
		}
	}
	c.mu.Lock()
	mine, ready, me := c.mirrorID, c.ready, c.rank
	c.mu.Unlock()
	if seg, err := c.rt.Segment(mid); err == nil && (!ready || mine != mid) && seg.Size() != c.mirrorSize(lay.capacity(me)) {
		c.rt.SegmentDelete(mid) // a leftover of an interrupted restore
	}
	if _, err := c.rt.SegmentCreate(ctx, mid, c.mirrorSize(lay.capacity(me)), nil); err != nil {
		return 0, fmt.Errorf("ckpt: mirror segment %d: %w", mid, err)
	}
	return mid, nil
}

// laps times the phases of a restore for its log line: "quiesce=1ms
// local=2ms ...".
type laps struct {
	last time.Time
	b    strings.Builder
}

func newLaps(t time.Time) *laps { return &laps{last: t} }

// lap ends the phase called name.
func (l *laps) lap(name string) {
	now := time.Now()
	if l.b.Len() > 0 {
		l.b.WriteByte(' ')
	}
	fmt.Fprintf(&l.b, "%s=%v", name, now.Sub(l.last).Round(time.Microsecond))
	l.last = now
}

func (l *laps) String() string { return l.b.String() }
