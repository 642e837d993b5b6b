package health

import "github.com/gaspigo/gaspigo/transport"

// Ring arithmetic over a member list in ring order. A member for which gone
// returns true (a confirmed failure) has left the ring: it takes no ring
// position, so the ring closes over it.

// ringSuccessors returns up to r live members that follow members[i] in
// ring order, nearest first. members[i] itself is never returned.
func ringSuccessors(members []transport.Proc, i, r int, gone func(transport.Proc) bool) []transport.Proc {
	n := len(members)
	var out []transport.Proc
	for d := 1; d < n && len(out) < r; d++ {
		p := members[(i+d)%n]
		if !gone(p) {
			out = append(out, p)
		}
	}
	return out
}

// ringPredecessors returns up to r live members that precede members[i],
// nearest first.
func ringPredecessors(members []transport.Proc, i, r int, gone func(transport.Proc) bool) []transport.Proc {
	n := len(members)
	var out []transport.Proc
	for d := 1; d < n && len(out) < r; d++ {
		p := members[(i-d%n+n)%n]
		if !gone(p) {
			out = append(out, p)
		}
	}
	return out
}

// helperOrder lists up to limit candidate helpers for probing members[ti],
// in the order they are asked: first the target's other monitors (its r
// nearest live predecessors), then alternately its live successors and its
// farther predecessors, nearest first. Members for which exclude returns
// true (the observer, processes it suspects) keep their ring position but
// are not listed; the target itself is never listed. Each member appears at
// most once.
func helperOrder(members []transport.Proc, ti, r, limit int, gone, exclude func(transport.Proc) bool) []transport.Proc {
	n := len(members)
	target := members[ti]
	preds := ringPredecessors(members, ti, n, gone)
	succs := ringSuccessors(members, ti, n, gone)
	out := make([]transport.Proc, 0, limit)
	add := func(p transport.Proc) {
		if len(out) >= limit || p == target || exclude(p) {
			return
		}
		for _, q := range out {
			if q == p {
				return
			}
		}
		out = append(out, p)
	}
	mon := min(r, len(preds))
	for _, p := range preds[:mon] {
		add(p)
	}
	rest := preds[mon:]
	for k := 0; k < len(succs) || k < len(rest); k++ {
		if k < len(succs) {
			add(succs[k])
		}
		if k < len(rest) {
			add(rest[k])
		}
	}
	return out
}
