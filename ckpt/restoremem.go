package ckpt

import (
	"context"
	"fmt"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// The memory level's restore, top to bottom: the shared first step
// (restore.go), this rank's plan (plan.go) carried out from its own buffer
// or from a holder's mirror, then the shared last steps.

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
	id, err := c.restoreFromMemory(ctx)
	done(id, err)
	return id, err
}

// restoreFromMemory is Restore without its trace span.
func (c *Checkpointer) restoreFromMemory(ctx context.Context) (uint64, error) {
	r, err := c.beginRestore(ctx, "restore", false)
	if err != nil {
		return 0, err
	}

	// This rank's part: the plan, then the snapshot in a local buffer. No
	// collective: a fetch from a holder is one-sided.
	pl := planRestore(r.me, r.n, r.mine.local, r.hs, r.ag.common, r.committed)
	var ch *choice
	var cerr error // why this rank cannot restore the agreed snapshot
	if pl.found {
		ch, cerr = c.prepareFromMemory(ctx, pl)
	}
	r.laps.lap("prepare")

	failed, err := c.settleRestore(ctx, r, pl.found, cerr, r.ag.maxGen+1)
	if err != nil {
		return 0, err
	}
	if !pl.found {
		return 0, fmt.Errorf("ckpt: %s: no checkpoint is held for every rank (none committed yet, or more failures than %d mirror(s) cover; try the disk level): %w", r.op, c.cfg.Mirrors, ErrNoCheckpoint)
	}
	if failed >= 0 {
		return 0, restoreFailed(r.op, pl.target.id, cerr, failed)
	}
	from := "holder"
	if pl.local >= 0 {
		from = "local"
	}
	return c.applyRestore(r, ch, from)
}

// readChunk is the most one fetch Read asks for (pgas caps one read at
// the transport's frame limit, 64 MiB). A variable so that tests can
// exercise many reads.
var readChunk int64 = 16 << 20

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
