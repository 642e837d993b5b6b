package health

import (
	"slices"

	"github.com/gaspigo/gaspigo/transport"
)

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
// most once. It walks the ring outward from the target only as far as it
// needs: O(limit + members skipped), not O(len(members)).
func helperOrder(members []transport.Proc, ti, r, limit int, gone, exclude func(transport.Proc) bool) []transport.Proc {
	n := len(members)
	target := members[ti]
	// walk returns the next live member in direction dir (+1 successors,
	// -1 predecessors), or false once the ring is walked round.
	walk := func(dir int) func() (transport.Proc, bool) {
		d := 0
		return func() (transport.Proc, bool) {
			for d < n-1 {
				d++
				if p := members[((ti+dir*d)%n+n)%n]; !gone(p) {
					return p, true
				}
			}
			return 0, false
		}
	}
	pred, succ := walk(-1), walk(+1)
	out := make([]transport.Proc, 0, limit)
	add := func(p transport.Proc) {
		if len(out) >= limit || p == target || exclude(p) || slices.Contains(out, p) {
			return
		}
		out = append(out, p)
	}
	for range r {
		p, ok := pred()
		if !ok {
			break
		}
		add(p)
	}
	for len(out) < limit {
		s, sok := succ()
		if sok {
			add(s)
		}
		p, pok := pred()
		if pok {
			add(p)
		}
		if !sok && !pok {
			break
		}
	}
	return out
}
