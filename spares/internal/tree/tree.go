// Package tree is the pure part of the dissemination tree of package
// spares's voters-only mode (docs/design.md §5.2): the layout of one
// state's tree, the choice of whom to ask for news, and what a process
// heard from the tree. The protocol that runs on it, over the node's
// control connections, is package follow's (spares/internal/follow), and
// the news kept to pass on package spares's (news.go): this package knows processes only by their ids and imports nothing of the
// project.
//
// The voters are the tree's roots and every other live process hangs
// below them in a k-ary tree, so news reaches every process in
// O(log_k N) hops and no process serves more than k children (a voter:
// k children and its Raft peers).
//
// The order is a pure function of the state: the voters in increasing
// proc order take positions 0..V-1, the other live processes that can
// take requests, in increasing proc order, take positions V, V+1, ...;
// the children of position p are V+k·p .. V+k·p+k-1, so the parent of
// position i ≥ V is (i-V)/k. Every process computes it from its own view;
// views that differ for a moment only make a process ask a different
// parent, since any process answers any asker.
package tree

import (
	"slices"
)

// None names no process (package spares's noProc).
const None = ^uint32(0)

// Tree is the dissemination tree of one state, computed once per state.
// It is read-only once built, so the nodes of one process that lay out
// the same tree may share it (package spares does): nothing hands out its
// order but copies.
type Tree struct {
	k      int
	order  []uint32 // voters (sorted), then the other live procs (sorted)
	voters int
}

// New lays out the tree with fan-out k (at least 1) whose roots are
// voters, the live voters, and whose other nodes are others, the live
// processes that take requests and do not vote. Neither slice is kept.
func New(voters, others []uint32, k int) *Tree {
	t := &Tree{k: max(k, 1), voters: len(voters)}
	t.order = make([]uint32, 0, len(voters)+len(others))
	t.order = append(t.order, voters...)
	slices.Sort(t.order)
	t.order = append(t.order, others...)
	slices.Sort(t.order[t.voters:])
	return t
}

// Fanout is the tree's k.
func (t *Tree) Fanout() int { return t.k }

// Roots returns the voters in order, a copy.
func (t *Tree) Roots() []uint32 { return slices.Clone(t.order[:t.voters]) }

// Clients returns the processes below the roots in tree order, a copy:
// O(N).
func (t *Tree) Clients() []uint32 { return slices.Clone(t.order[t.voters:]) }

// position returns proc's place in the order, -1 if it has none.
func (t *Tree) position(proc uint32) int {
	if i, ok := slices.BinarySearch(t.order[:t.voters], proc); ok {
		return i
	}
	if i, ok := slices.BinarySearch(t.order[t.voters:], proc); ok {
		return t.voters + i
	}
	return -1
}

// Parent returns proc's parent, None for a root (a voter), a process
// outside the tree or a tree without roots.
func (t *Tree) Parent(proc uint32) uint32 {
	i := t.position(proc)
	if i < t.voters || t.voters == 0 {
		return None
	}
	return t.order[(i-t.voters)/t.k]
}

// Children returns proc's children in order.
func (t *Tree) Children(proc uint32) []uint32 {
	i := t.position(proc)
	if i < 0 {
		return nil
	}
	lo := t.voters + t.k*i
	if lo >= len(t.order) || t.voters == 0 {
		return nil
	}
	return slices.Clone(t.order[lo:min(lo+t.k, len(t.order))])
}

// Upstream returns whom proc asks for news, best first: its parent, the
// parent's parent and so on up to a root, then the other voters (from the
// one after that root, round the ring). A voter's list is the other
// voters; a process outside the tree (a joining one) gets the voters.
func (t *Tree) Upstream(proc uint32) []uint32 {
	var out []uint32
	root := -1
	for p := t.Parent(proc); p != None; p = t.Parent(p) {
		out = append(out, p)
		if i := t.position(p); i < t.voters {
			root = i
		}
	}
	if i := t.position(proc); i >= 0 && i < t.voters {
		root = i
	}
	for j := 1; j <= t.voters; j++ {
		v := t.order[(root+j+t.voters)%t.voters]
		if v != proc && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// Depth is the number of hops from a root to the deepest process.
func (t *Tree) Depth() int {
	if len(t.order) == 0 || t.voters == 0 {
		return 0
	}
	d := 0
	for p := t.order[len(t.order)-1]; t.Parent(p) != None; p = t.Parent(p) {
		d++
	}
	return d
}
