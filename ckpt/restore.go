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

// A restore comes from one of two levels, each a path of its own that
// reads top to bottom:
//
//   - the memory level, Restore (restoremem.go): this rank's own buffer,
//     or the mirror a holder keeps of it, fetched with one-sided Reads;
//   - the disk level, LoadFromDisk (restoredisk.go): this rank's file of
//     the newest checkpoint every rank can load.
//
// Both run the same shared steps, defined here, around their own:
//
//  1. beginRestore: stop the pushes, re-create the local segment, and
//     agree on the inventory (inbox.go): the highest generation, the
//     mirror segment in use, and the snapshots every live rank has;
//  2. the level's own step puts this rank's snapshot in a local buffer and
//     checks it (verifyBuf);
//  3. settleRestore: re-create the mirror segment for the new placement
//     (setupMirror), agree that every rank has its snapshot ready, and
//     install the new placement and generation;
//  4. applyRestore: copy the snapshot into the registered regions
//     (copyOut) and start the background rebuild of the mirrors.
//
// Every rank runs the same collectives in the same order: steps 1 and 3
// on either level, and in step 2 none on the memory level (its reads are
// one-sided), two allreduces per round of the disk level's search.

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

// choice is what this rank restores: a pair in local buffer buf, whose
// header has been checked against the registered regions.
type choice struct {
	p   pair
	buf int
	hdr Header
}

// restoring is one restore in progress, on either level: what
// beginRestore found and agreed, and what settleRestore set up.
type restoring struct {
	op        string // "restore" or "load from disk", for errors
	start     time.Time
	laps      *laps
	n, me     int
	committed int // this rank's buffer of its last committed snapshot, -1 if none
	mine      entry
	lay       *layout   // the placement over the live ranks
	ag        agreement // the inventory's agreement
	hs        []held    // the copies of this rank's snapshots its holders reported
	mid       segments.ID
	newGen    uint64
}

// beginRestore is the first shared step of a restore (op names it in
// errors): it stops this rank's pushes, re-creates the local segment
// (collective), refuses vacant ranks when the disk level takes part
// (fromDisk, or Config.Dir), and agrees on the inventory (a report to
// each rank this rank holds copies for, then two allreduces).
func (c *Checkpointer) beginRestore(ctx context.Context, op string, fromDisk bool) (*restoring, error) {
	start := time.Now()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	r := &restoring{op: op, start: start, laps: newLaps(start)}
	if err := c.quiesce(ctx); err != nil {
		return nil, fmt.Errorf("ckpt: %s: %w", op, err)
	}
	r.laps.lap("quiesce")
	if err := c.createLocal(ctx); err != nil {
		return nil, fmt.Errorf("ckpt: %s: %w", op, err)
	}
	r.laps.lap("local")
	c.mu.Lock()
	r.n, r.me, r.committed = c.n, c.rank, c.committed
	c.mu.Unlock()
	at := c.rt.Placement()
	live := c.rt.LiveRanks()
	if len(live) < r.n && (fromDisk || c.cfg.Dir != "") {
		// Every disk checkpoint has one file per rank, and its manifest
		// is written once every rank reported one.
		return nil, fmt.Errorf("ckpt: %s: the disk level needs every rank, and ranks %v of %d are vacant (the job shrank): turn off Config.Dir for a job that shrinks: %w", op, vacantOf(live, r.n), r.n, ErrInvalid)
	}
	var err error
	if r.mine, err = c.myEntry(); err != nil {
		return nil, fmt.Errorf("ckpt: %s: inventory: %w", op, err)
	}
	if r.lay = c.layoutNow(); c.rt.Placement() != at {
		r.lay = sharedLayout(c.hosts(), c.cfg.Mirrors, live) // a view came meanwhile: live's own
	}
	if r.ag, r.hs, err = c.agree(ctx, r.mine, live, r.lay); err != nil {
		return nil, fmt.Errorf("ckpt: %s: inventory: %w", op, err)
	}
	r.laps.lap("inventory")
	return r, nil
}

// settleRestore is the shared step after the level's own: it re-creates
// the mirror segment for the new placement (collective), agrees that every
// rank has its snapshot ready (an allreduce; found: the levels agreed on
// one, cerr: why this rank cannot restore it), and installs the placement,
// the mirror segment and generation newGen. When nothing was found, this
// rank's snapshots are forgotten. It returns the lowest rank that could
// not restore the agreed snapshot, -1 when every rank can (or nothing was
// found); the restore must then be run again.
func (c *Checkpointer) settleRestore(ctx context.Context, r *restoring, found bool, cerr error, newGen uint64) (int, error) {
	mid, err := c.setupMirror(ctx, r.ag, r.lay)
	if err != nil {
		return 0, fmt.Errorf("ckpt: %s: %w", r.op, err)
	}
	r.laps.lap("mirror")

	// Everyone restored?
	vals := []uint64{1, math.MaxUint64}
	if found && cerr != nil {
		vals[0], vals[1] = 0, uint64(r.me)
	}
	if err := pgas.Allreduce(ctx, c.rt, nil, vals, pgas.OpMin); err != nil {
		return 0, fmt.Errorf("ckpt: %s: final agreement: %w", r.op, err)
	}
	r.laps.lap("agreement")

	r.mid, r.newGen = mid, newGen
	c.mu.Lock()
	oldMirror, hadMirror := c.mirrorID, c.ready
	c.lay, c.mirrorID, c.mirrorCap, c.ready = r.lay, mid, r.lay.capacity(r.me), true
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
		return -1, nil
	}
	if vals[0] == 0 {
		c.mu.Lock()
		c.needsRestore = true // nothing consistent to checkpoint from
		c.mu.Unlock()
		return int(vals[1]), nil
	}
	return -1, nil
}

// restoreFailed is the error of a restore of checkpoint id that rank
// failed (settleRestore): this rank's cause cerr, if it failed itself.
func restoreFailed(op string, id uint64, cerr error, rank int) error {
	if cerr != nil {
		return fmt.Errorf("ckpt: %s of checkpoint %d: %w: %w", op, id, ErrRestoreFailed, cerr)
	}
	return fmt.Errorf("ckpt: %s: %w on rank %d", op, ErrRestoreFailed, rank)
}

// applyRestore is the last shared step, once every rank has its snapshot
// ch ready (from: "local", "holder" or "disk", for the log): it copies the
// snapshot into the registered regions, makes it the last committed
// checkpoint, and starts the background rebuild of the holders that lack
// it. It returns the restored id.
func (c *Checkpointer) applyRestore(r *restoring, ch *choice, from string) (uint64, error) {
	// Apply: the regions, then the committed state.
	if err := c.copyOut(ch); err != nil {
		// Checked before the agreement; only a region that changed since
		// can fail here.
		return 0, fmt.Errorf("ckpt: %s of checkpoint %d: %w", r.op, ch.p.id, err)
	}
	me := r.me
	if c.cfg.Dir != "" && me == 0 {
		// Directories above the restored id belong to the abandoned
		// timeline (never completed); the new one will reuse their names.
		c.pruneAbove(c.cfg.Dir, ch.p.id)
	}
	var ts []target
	for _, s := range rebuildPositions(r.hs, r.lay, int(r.mid), me, ch.p, ch.buf) {
		ts = append(ts, target{rank: s.holder, off: c.slotOff(s.pos, s.slot)})
	}
	c.mu.Lock()
	c.committed, c.lastCommit = ch.buf, ch.p.id
	c.lastStarted, c.hasStarted = ch.p.id, true
	c.bufs[1-ch.buf].valid = false
	since := r.start
	if !c.failureAt.IsZero() {
		since = c.failureAt
	}
	c.failureAt = time.Time{}
	c.diskRestoredLocked(ch.p.id, r.newGen)
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
	c.log.Info("checkpoint restored", "rank", me, "id", ch.p.id, "gen", ch.p.gen, "from", from,
		"epoch", c.rt.Epoch(), "took", time.Since(r.start), "phases", r.laps, "rebuild_holders", len(ts))
	if len(ts) == 0 {
		c.log.Info("mirrors intact", "rank", me, "unprotected", window)
	}
	return ch.p.id, nil
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
