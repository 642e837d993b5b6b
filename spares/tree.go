package spares

import (
	"slices"
)

// The dissemination tree of Config.VotersOnly: the voters are its roots
// and every other live process hangs below them in a k-ary tree, so news
// reaches every process in O(log_k N) hops and no process serves more
// than k children (a voter: k children and its Raft peers).
//
// The order is a pure function of the state: the voters in increasing
// proc order take positions 0..V-1, the other live processes that can
// take requests (CtlAddr set), in increasing proc order, take positions
// V, V+1, ...; the children of position p are V+k·p .. V+k·p+k-1, so the
// parent of position i ≥ V is (i-V)/k. Every process computes it from
// its own view; views that differ for a moment only make a process ask a
// different parent, since any process answers any asker.

// tree is the dissemination tree of one state, computed once per state.
type tree struct {
	k      int
	order  []uint32 // voters (sorted), then the other live procs (sorted)
	voters int
}

// newTree lays out the tree of st with fan-out k (at least 1).
func newTree(st *State, k int) *tree {
	k = max(k, 1)
	t := &tree{k: k}
	for _, v := range st.Voters {
		if _, failed := st.Failed[v]; !failed {
			t.order = append(t.order, v)
		}
	}
	slices.Sort(t.order)
	t.voters = len(t.order)
	start := len(t.order)
	for p, info := range st.Procs {
		if _, failed := st.Failed[p]; failed || info.CtlAddr == "" || slices.Contains(t.order[:t.voters], p) {
			continue
		}
		t.order = append(t.order, p)
	}
	slices.Sort(t.order[start:])
	return t
}

// position returns proc's place in the order, -1 if it has none.
func (t *tree) position(proc uint32) int {
	if i, ok := slices.BinarySearch(t.order[:t.voters], proc); ok {
		return i
	}
	if i, ok := slices.BinarySearch(t.order[t.voters:], proc); ok {
		return t.voters + i
	}
	return -1
}

// parent returns proc's parent, NoProc for a root (a voter), a process
// outside the tree or a tree without roots.
func (t *tree) parent(proc uint32) uint32 {
	i := t.position(proc)
	if i < t.voters || t.voters == 0 {
		return NoProc
	}
	return t.order[(i-t.voters)/t.k]
}

// children returns proc's children in order.
func (t *tree) children(proc uint32) []uint32 {
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

// upstream returns whom proc asks for news, best first: its parent, the
// parent's parent and so on up to a root, then the other voters (from the
// one after that root, round the ring). A voter's list is the other
// voters; a process outside the tree (a joining one) gets the voters.
func (t *tree) upstream(proc uint32) []uint32 {
	var out []uint32
	root := -1
	for p := t.parent(proc); p != NoProc; p = t.parent(p) {
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

// depth is the number of hops from a root to the deepest process.
func (t *tree) depth() int {
	if len(t.order) == 0 || t.voters == 0 {
		return 0
	}
	d := 0
	for p := t.order[len(t.order)-1]; t.parent(p) != NoProc; p = t.parent(p) {
		d++
	}
	return d
}
