package ckpt

import (
	"math"
	"slices"
)

// The restore plan: what every rank restores after a failure, decided from
// the inventory alone (no I/O), so that the choice can be tested from
// scripts (testdata/restore/*.txt). Restore exchanges the inventory, makes
// the plan, and carries it out.

// source is a holder's verified copy of a rank's snapshot: slot slot at
// position pos of the holder's mirror segment.
type source struct {
	holder    int
	mirror    int // the holder's mirror segment ID
	pos, slot int
}

// restorePlan is one rank's part of a restore from memory.
type restorePlan struct {
	// found: some snapshot is held for every live rank (else nothing is
	// restorable and the program starts over: ErrNoCheckpoint).
	found bool
	// target is the snapshot every live rank restores: the one every
	// live rank has, locally or at a holder, with the highest id (then
	// generation).
	target pair
	// maxGen is the highest generation in the inventory; the restored
	// timeline is a newer one (a disk checkpoint may raise it).
	maxGen uint64
	// local is the buffer of this rank that holds target, -1 if none.
	local int
	// With local == -1: fetch into buffer into (never the one holding
	// this rank's last committed snapshot), from sources in turn (holders
	// in ring order after this rank, so that ranks spread their reads).
	into    int
	sources []source
}

// planRestore plans rank me's restore from the inventory (entries by rank,
// live the ranks of the view); committed is me's buffer holding its last
// committed snapshot, -1 if none.
func planRestore(entries []entry, live []int, me, committed int) restorePlan {
	pl := restorePlan{local: -1, into: -1, maxGen: maxGen(entries)}
	pl.target, pl.found = commonPair(entries, live)
	if !pl.found {
		return pl
	}
	for b, p := range entries[me].local {
		if p != nil && *p == pl.target {
			pl.local = b
			return pl
		}
	}
	pl.into = 0
	if committed == 0 {
		pl.into = 1
	}
	n := len(entries)
	for k := 1; k < n; k++ {
		h := entries[(me+k)%n]
		for _, cp := range h.copies {
			if cp.src == me && cp.p == pl.target {
				pl.sources = append(pl.sources, source{holder: h.rank, mirror: h.mirrorID, pos: cp.pos, slot: cp.slot})
			}
		}
	}
	return pl
}

// commonPair returns the snapshot every live rank has (locally or at a
// holder), with the highest id (then generation). A vacant rank's
// snapshots are not needed: no process restores them.
func commonPair(entries []entry, live []int) (pair, bool) {
	if len(live) == 0 {
		return pair{}, false
	}
	n := len(entries)
	have := make([]map[pair]bool, n)
	for r := range have {
		have[r] = make(map[pair]bool)
	}
	for _, e := range entries {
		for _, p := range e.local {
			if p != nil {
				have[e.rank][*p] = true
			}
		}
		for _, h := range e.copies {
			if h.src >= 0 && h.src < n {
				have[h.src][h.p] = true
			}
		}
	}
	var best pair
	found := false
	for p := range have[live[0]] {
		all := true
		for _, r := range live[1:] {
			if all = have[r][p]; !all {
				break
			}
		}
		if all && (!found || p.id > best.id || (p.id == best.id && p.gen > best.gen)) {
			best, found = p, true
		}
	}
	return best, found
}

// maxGen is the highest generation any rank's entry names.
func maxGen(entries []entry) uint64 {
	g := uint64(0)
	for _, e := range entries {
		g = max(g, e.gen)
		for _, p := range e.local {
			if p != nil {
				g = max(g, p.gen)
			}
		}
		for _, h := range e.copies {
			g = max(g, h.p.gen)
		}
	}
	return g
}

// rebuildPositions lists, for rank me's restored snapshot (target, held
// in buffer buf after the restore), the holders of the new layout lay
// that lack it at the position the layout gives and the slot buf: they
// get it pushed again. mirror is the new mirror segment ID; a holder
// whose entry names another one holds nothing there yet.
func rebuildPositions(entries []entry, lay *layout, mirror, me int, target pair, buf int) []source {
	var ts []source
	for _, h := range lay.holders[me] {
		pos := lay.position(h, me)
		e := entries[h]
		intact := false
		if e.mirrorID == mirror {
			for _, cp := range e.copies {
				if cp.src == me && cp.p == target && cp.pos == pos && cp.slot == buf {
					intact = true
				}
			}
		}
		if !intact {
			ts = append(ts, source{holder: h, mirror: mirror, pos: pos, slot: buf})
		}
	}
	return ts
}

// diskSearch is one rank's part of the agreement on the disk checkpoint
// every rank loads (LoadFromDisk), a pure state machine that the caller
// drives with two min-allreduces per round:
//
//  1. vote: each rank proposes id+1 of its newest checkpoint at or below
//     the bound that it can load (0: none); the minimum over the ranks,
//     less one, is the candidate (a 0 minimum ends the search: nothing);
//  2. each rank says whether it loaded the candidate; if all did, that is
//     the checkpoint, else the bound drops below the candidate and a new
//     round starts.
//
// A rank's newest loadable checkpoint may be newer than another rank's
// (a checkpoint whose files some rank lacks), and a candidate may be one
// a rank cannot load although it had an older one; each round lowers the
// bound, so the search ends after at most len(ids)+2 rounds.
type diskSearch struct {
	ids    []uint64 // this rank's checkpoint directories, newest first
	bound  uint64
	rounds int
}

func newDiskSearch(ids []uint64) *diskSearch {
	return &diskSearch{ids: ids, bound: math.MaxUint64}
}

// vote returns this rank's proposal for the round: id+1 of the newest id
// at or below the bound for which loadable holds, 0 if none. It returns
// ok false once the rounds are used up.
func (d *diskSearch) vote(loadable func(id uint64) bool) (v uint64, ok bool) {
	if d.rounds > len(d.ids)+1 {
		return 0, false
	}
	d.rounds++
	for _, id := range d.ids {
		if id <= d.bound && loadable(id) {
			return id + 1, true
		}
	}
	return 0, true
}

// candidate turns the minimum vote into the candidate checkpoint; ok is
// false when some rank has nothing to load (the search ends, nothing
// found). has reports whether this rank has the candidate's directory.
func (d *diskSearch) candidate(minVote uint64) (x uint64, has, ok bool) {
	if minVote == 0 {
		return 0, false, false
	}
	x = minVote - 1
	return x, slices.Contains(d.ids, x), true
}

// settle takes whether every rank loaded candidate x: done when all did;
// else the bound drops below x, and more is false when nothing is left
// below it.
func (d *diskSearch) settle(x uint64, allLoaded bool) (done, more bool) {
	if allLoaded {
		return true, false
	}
	if x == 0 {
		return false, false
	}
	d.bound = x - 1
	return false, true
}
