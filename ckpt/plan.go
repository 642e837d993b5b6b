package ckpt

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
