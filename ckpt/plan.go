package ckpt

import (
	"math"
	"slices"
)

// The restore plan: what every rank restores after a failure, decided from
// a rank's own inventory (its local snapshots, and the verified copies of
// them that its holders report) and the result of one agreement (the
// snapshots every live rank has), so that the choice can be tested from
// scripts (testdata/restore/*.txt) with no I/O. Restore exchanges the
// reports and the agreement (inbox.go), makes the plan, and carries it
// out. No step takes a table over all ranks: a rank's cost is its own
// snapshots, the copies it holds for others, and a constant-size
// allreduce.

// source is a holder's verified copy of a rank's snapshot: slot slot at
// position pos of the holder's mirror segment.
type source struct {
	holder    int
	mirror    int // the holder's mirror segment ID
	pos, slot int
}

// held is a holder's verified copy of a rank's snapshot p, as the holder
// reports it to the rank at a restore.
type held struct {
	source
	p pair
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
	// local is the buffer of this rank that holds target, -1 if none.
	local int
	// With local == -1: fetch into buffer into (never the one holding
	// this rank's last committed snapshot), from sources in turn (holders
	// in ring order after this rank, so that ranks spread their reads).
	into    int
	sources []source
}

// maxCandidates bounds the snapshots a rank offers to the agreement on
// the target (haveSet): the newest ones. A rank has two local buffers and
// a few copies at its holders, so this never binds in practice; if it
// did, the agreement would pick among the newest only.
const maxCandidates = 16

// newer orders snapshots by id, then generation.
func newer(a, b pair) bool { return a.id > b.id || (a.id == b.id && a.gen > b.gen) }

// haveSet lists the snapshots of a rank that it can restore: its local
// ones and those its holders hold (hs), distinct, newest first, at most
// maxCandidates.
func haveSet(local [2]*pair, hs []held) []pair {
	var ps []pair
	for _, p := range local {
		if p != nil {
			ps = append(ps, *p)
		}
	}
	for _, h := range hs {
		ps = append(ps, h.p)
	}
	slices.SortFunc(ps, func(a, b pair) int {
		switch {
		case newer(a, b):
			return -1
		case newer(b, a):
			return 1
		}
		return 0
	})
	ps = slices.Compact(ps)
	return ps[:min(len(ps), maxCandidates)]
}

// intersectPairs returns the snapshots in both a and b (each newest
// first), newest first: the agreement's combine.
func intersectPairs(a, b []pair) []pair {
	var out []pair
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			out = append(out, a[i])
			i++
			j++
		case newer(a[i], b[j]):
			i++
		default:
			j++
		}
	}
	return out
}

// planRestore plans rank me's restore (of n ranks): local is me's
// complete local snapshots, hs the copies of them its holders hold,
// common the snapshots every live rank has (the agreement: the
// intersection of the ranks' haveSets), and committed me's buffer holding
// its last committed snapshot, -1 if none.
func planRestore(me, n int, local [2]*pair, hs []held, common []pair, committed int) restorePlan {
	pl := restorePlan{local: -1, into: -1}
	if len(common) == 0 {
		return pl
	}
	pl.target, pl.found = common[0], true
	for b, p := range local {
		if p != nil && *p == pl.target {
			pl.local = b
			return pl
		}
	}
	pl.into = 0
	if committed == 0 {
		pl.into = 1
	}
	var from []held
	for _, h := range hs {
		if h.p == pl.target {
			from = append(from, h)
		}
	}
	// Holders in ring order after me, then by position and slot.
	slices.SortStableFunc(from, func(a, b held) int {
		da, db := (a.holder-me+n)%n, (b.holder-me+n)%n
		if da != db {
			return da - db
		}
		if a.pos != b.pos {
			return a.pos - b.pos
		}
		return a.slot - b.slot
	})
	for _, h := range from {
		pl.sources = append(pl.sources, h.source)
	}
	return pl
}

// rebuildPositions lists, for rank me's restored snapshot (target, held
// in buffer buf after the restore), the holders of the new layout lay
// that lack it at the position the layout gives and the slot buf: they
// get it pushed again. mirror is the new mirror segment ID; hs are the
// copies of me's snapshots that the holders reported (a copy in another
// mirror segment is not there).
func rebuildPositions(hs []held, lay *layout, mirror, me int, target pair, buf int) []source {
	var ts []source
	for _, h := range lay.holders[me] {
		pos := lay.position(h, me)
		intact := false
		for _, c := range hs {
			if c.holder == h && c.mirror == mirror && c.p == target && c.pos == pos && c.slot == buf {
				intact = true
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
