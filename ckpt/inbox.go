package ckpt

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// The restore's exchange. Each rank needs to know which snapshots it can
// restore: its own complete local ones, and the verified copies its
// holders keep of it (a promoted spare has only the latter). Every holder
// reports the copies it keeps to their ranks, with one-sided operations
// into the rank's inbox (a FetchAdd reserves places, one Write fills
// them); then two allreduces of constant size settle the rest: the
// highest generation and mirror segment in use, whether the mirror
// segment still fits, and the snapshots every live rank has (the
// intersection of the ranks' haveSets). A rank's cost is a few messages
// per rank it holds copies for, plus the allreduces: nothing is gathered
// from every rank.
//
// Local segment, after the disk board:
//
//	[inboxOff, +8)             reports received (a count, FetchAdd)
//	[inboxOff+8, +inboxCap*R)  the reports, R = reportLen bytes each
//	[outboxOff, +outboxCap*R)  reports this rank is sending
//
// A report is reportWords little-endian words: the holder's rank+1, its
// mirror segment ID, pos<<1|slot, the snapshot's id and generation, and
// the rank whose snapshot it is.
const (
	reportWords = 6
	reportLen   = 8 * reportWords
	inboxCap    = 64 // reports a rank takes; more are dropped (logged)
	outboxCap   = 64 // reports a holder has in flight at once
)

func (c *Checkpointer) inboxOff() int64 {
	return c.boardOff() + int64(c.rt.Size())*recordRing*recordLen
}

func (c *Checkpointer) outboxOff() int64 { return c.inboxOff() + 8 + inboxCap*reportLen }

// clearInbox empties this rank's inbox, if its local segment exists.
// Restore calls it before the local segment's collective (re)creation,
// which no holder passes before every rank entered it: no report of this
// restore can arrive before.
func (c *Checkpointer) clearInbox() error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return nil // a new process: created zeroed
	}
	w, err := seg.Word(c.inboxOff())
	if err != nil {
		return err
	}
	w.Store(0)
	clear(seg.Bytes()[c.inboxOff()+8 : c.outboxOff()])
	return nil
}

// reportHeld reports the verified copies this rank holds (mine.copies) to
// their ranks (live: those of the view), and waits until the reports
// arrived.
func (c *Checkpointer) reportHeld(ctx context.Context, mine entry, live []int) error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	bySrc := map[int][]heldCopy{}
	for _, h := range mine.copies {
		if h.src != mine.rank {
			bySrc[h.src] = append(bySrc[h.src], h)
		}
	}
	srcs := make([]int, 0, len(bySrc))
	for s := range bySrc {
		if _, ok := slices.BinarySearch(live, s); ok {
			srcs = append(srcs, s)
		}
	}
	slices.Sort(srcs)
	q, mem, staged := c.cfg.Queue, seg.Bytes(), 0
	for _, src := range srcs {
		cs := bySrc[src]
		cs = cs[:min(len(cs), outboxCap)]
		if staged+len(cs) > outboxCap {
			if err := c.rt.Wait(ctx, q); err != nil {
				return err
			}
			staged = 0
		}
		at, err := c.rt.FetchAdd(ctx, src, pgas.Loc{Seg: c.local, Off: c.inboxOff()}, uint64(len(cs)))
		if err != nil {
			c.rt.Wait(ctx, q)
			return err
		}
		if at >= inboxCap {
			c.log.Warn("restore: inbox full, copies not reported", "rank", mine.rank, "to", src, "copies", len(cs))
			continue
		}
		k := min(len(cs), inboxCap-int(at))
		off := c.outboxOff() + int64(staged)*reportLen
		for i, h := range cs[:k] {
			w := mem[off+int64(i)*reportLen:]
			for x, v := range []uint64{uint64(mine.rank) + 1, uint64(mine.mirrorID), uint64(h.pos)<<1 | uint64(h.slot), h.p.id, h.p.gen, uint64(src)} {
				binary.LittleEndian.PutUint64(w[8*x:], v)
			}
		}
		remote := pgas.Loc{Seg: c.local, Off: c.inboxOff() + 8 + int64(at)*reportLen}
		if err := c.rt.Write(ctx, q, src, remote, pgas.Loc{Seg: c.local, Off: off}, int64(k)*reportLen); err != nil {
			c.rt.Wait(ctx, q)
			return err
		}
		staged += k
	}
	return c.rt.Wait(ctx, q)
}

// readInbox returns the copies of this rank's snapshots that its holders
// reported. Call it after an agreement that follows every rank's
// reportHeld.
func (c *Checkpointer) readInbox(me int) ([]held, error) {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return nil, err
	}
	w, err := seg.Word(c.inboxOff())
	if err != nil {
		return nil, err
	}
	n := min(int(w.Load()), inboxCap)
	mem := seg.Bytes()[c.inboxOff()+8:]
	hs := make([]held, 0, n)
	for i := range n {
		var v [reportWords]uint64
		for x := range v {
			v[x] = binary.LittleEndian.Uint64(mem[i*reportLen+8*x:])
		}
		if v[0] == 0 || int(v[5]) != me {
			// Not a report of this restore: the copy it names is not used.
			c.log.Warn("restore: a report in the inbox is not for this rank; ignored", "rank", me, "for", v[5], "holder", int(v[0])-1)
			continue
		}
		hs = append(hs, held{source: source{holder: int(v[0]) - 1, mirror: int(segments.ID(v[1])), pos: int(v[2] >> 1), slot: int(v[2] & 1)}, p: pair{v[3], v[4]}})
	}
	return hs, nil
}

// agreement is what the ranks settle at a restore, besides the reports.
type agreement struct {
	maxGen uint64 // the highest generation any rank knows of
	cur    int    // the highest mirror segment ID in use, -1 for none
	fits   [2]bool
	common []pair // the snapshots every live rank has, newest first
}

// agree runs the restore's exchange: reports, then the two allreduces.
// mine is this rank's inventory, lay the new placement; it returns the
// agreement and the copies of this rank's snapshots its holders keep.
func (c *Checkpointer) agree(ctx context.Context, mine entry, live []int, lay *layout) (agreement, []held, error) {
	var ag agreement
	if err := c.reportHeld(ctx, mine, live); err != nil {
		return ag, nil, fmt.Errorf("reports: %w", err)
	}
	g := mine.gen
	for _, p := range mine.local {
		if p != nil {
			g = max(g, p.gen)
		}
	}
	for _, h := range mine.copies {
		g = max(g, h.p.gen)
	}
	// Every rank's reports arrived once this completes.
	first := []uint64{g, uint64(mine.mirrorID + 1)}
	if err := pgas.Allreduce(ctx, c.rt, nil, first, pgas.OpMax); err != nil {
		return ag, nil, err
	}
	ag.maxGen, ag.cur = first[0], int(first[1])-1
	hs, err := c.readInbox(mine.rank)
	if err != nil {
		return ag, nil, err
	}
	// [fits a, fits b, then maxCandidates pairs as (id+1, gen); 0: none].
	v := make([]uint64, 2+2*maxCandidates)
	for i, id := range c.mirrorIDs() {
		if mine.mirrorID != int(id) || c.mirrorSize(mine.capacity) == c.mirrorSize(lay.capacity(mine.rank)) {
			v[i] = 1
		}
	}
	encodePairs(v[2:], haveSet(mine.local, hs))
	err = pgas.AllreduceFunc(ctx, c.rt, nil, v, func(dst, src []uint64) {
		dst[0], dst[1] = min(dst[0], src[0]), min(dst[1], src[1])
		common := intersectPairs(decodePairs(dst[2:]), decodePairs(src[2:]))
		clear(dst[2:])
		encodePairs(dst[2:], common)
	})
	if err != nil {
		return ag, nil, err
	}
	ag.fits = [2]bool{v[0] == 1, v[1] == 1}
	ag.common = decodePairs(v[2:])
	return ag, hs, nil
}

// mirrorIDs are the two mirror segment IDs.
func (c *Checkpointer) mirrorIDs() [2]segments.ID {
	return [2]segments.ID{c.cfg.SegmentID + 1, c.cfg.SegmentID + 2}
}

func encodePairs(w []uint64, ps []pair) {
	for i, p := range ps[:min(len(ps), len(w)/2)] {
		w[2*i], w[2*i+1] = p.id+1, p.gen
	}
}

func decodePairs(w []uint64) []pair {
	var ps []pair
	for i := 0; i+1 < len(w) && w[i] != 0; i += 2 {
		ps = append(ps, pair{w[i] - 1, w[i+1]})
	}
	return ps
}
