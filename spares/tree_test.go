package spares

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func treeState(procs []uint32, voters []uint32, failed ...uint32) State {
	st := State{Epoch: 2, Procs: map[uint32]ProcInfo{}, Failed: map[uint32]uint64{}, Voters: voters}
	for _, p := range procs {
		st.Procs[p] = ProcInfo{Host: "h", CtlAddr: fmt.Sprintf("c%d", p), RaftAddr: fmt.Sprintf("r%d", p)}
	}
	for _, p := range failed {
		st.Failed[p] = 1
	}
	return st
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

func TestTreeTable(t *testing.T) {
	// 2 voters (7 and 3), fan-out 2, procs 0..9, proc 5 failed, proc 9 has no control address.
	st := treeState(seq(10), []uint32{7, 3}, 5)
	st.Procs[9] = ProcInfo{Host: "h"}
	tr := newTree(&st, 2)
	if want := []uint32{3, 7, 0, 1, 2, 4, 6, 8}; !slices.Equal(tr.order, want) {
		t.Fatalf("order %v, want %v", tr.order, want)
	}
	for _, c := range []struct {
		proc     uint32
		parent   uint32
		children []uint32
		upstream []uint32
	}{
		{3, NoProc, []uint32{0, 1}, []uint32{7}},
		{7, NoProc, []uint32{2, 4}, []uint32{3}},
		{0, 3, []uint32{6, 8}, []uint32{3, 7}},
		{1, 3, nil, []uint32{3, 7}},
		{2, 7, nil, []uint32{7, 3}},
		{4, 7, nil, []uint32{7, 3}},
		{6, 0, nil, []uint32{0, 3, 7}},
		{8, 0, nil, []uint32{0, 3, 7}},
		{5, NoProc, nil, []uint32{3, 7}}, // failed: outside the tree, asks the voters
		{9, NoProc, nil, []uint32{3, 7}}, // no control address
	} {
		if p := tr.parent(c.proc); p != c.parent {
			t.Errorf("parent(%d) = %d, want %d", c.proc, p, c.parent)
		}
		if ch := tr.children(c.proc); !slices.Equal(ch, c.children) {
			t.Errorf("children(%d) = %v, want %v", c.proc, ch, c.children)
		}
		if up := tr.upstream(c.proc); !slices.Equal(up, c.upstream) {
			t.Errorf("upstream(%d) = %v, want %v", c.proc, up, c.upstream)
		}
	}
	if d := tr.depth(); d != 2 {
		t.Errorf("depth %d, want 2", d)
	}
	// No voters: nobody has a parent; everyone asks nobody in particular.
	none := treeState(seq(4), nil)
	if tr := newTree(&none, 3); tr.parent(2) != NoProc || len(tr.upstream(2)) != 0 || tr.depth() != 0 {
		t.Errorf("tree without voters: parent %d upstream %v", tr.parent(2), tr.upstream(2))
	}
}

// naiveTree assigns the clients one by one, breadth first, to the first
// process (voters first) that has fewer than k children.
func naiveTree(st *State, k int) map[uint32]uint32 {
	var voters, clients []uint32
	for p, info := range st.Procs {
		if _, f := st.Failed[p]; f || info.CtlAddr == "" {
			continue
		}
		if slices.Contains(st.Voters, p) {
			voters = append(voters, p)
		} else {
			clients = append(clients, p)
		}
	}
	slices.Sort(voters)
	slices.Sort(clients)
	parent := map[uint32]uint32{}
	queue := slices.Clone(voters)
	kids := map[uint32]int{}
	for _, c := range clients {
		for kids[queue[0]] == k {
			queue = queue[1:]
		}
		parent[c] = queue[0]
		kids[queue[0]]++
		queue = append(queue, c)
	}
	for _, v := range voters {
		parent[v] = NoProc
	}
	return parent
}

// The tree against the naive reference, on random states; and its cost:
// no process has more than k children, and the depth is O(log_k N).
func TestTreeMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(600)
		k := 1 + rng.IntN(9)
		procs := make([]uint32, 0, n)
		for _, p := range rng.Perm(3 * n)[:n] {
			procs = append(procs, uint32(p))
		}
		nv := min(1+rng.IntN(5), n)
		voters := slices.Clone(procs[:nv])
		var failed []uint32
		for _, p := range procs[nv:] {
			if rng.IntN(10) == 0 {
				failed = append(failed, p)
			}
		}
		st := treeState(procs, voters, failed...)
		tr := newTree(&st, k)
		want := naiveTree(&st, k)
		kids := map[uint32]int{}
		for p, wp := range want {
			if got := tr.parent(p); got != wp {
				t.Fatalf("trial %d (n=%d k=%d): parent(%d) = %d, naive %d", trial, n, k, p, got, wp)
			}
			if wp != NoProc {
				kids[wp]++
				if !slices.Contains(tr.children(wp), p) {
					t.Fatalf("trial %d: %d not among children(%d) = %v", trial, p, wp, tr.children(wp))
				}
			}
		}
		for p, c := range kids {
			if c > k {
				t.Fatalf("trial %d: %d has %d children, k=%d", trial, p, c, k)
			}
		}
		// depth ≤ ceil(log_k(clients/voters + 1)) + 1
		bound, reach := 0, nv
		for covered := nv; covered < len(tr.order); bound++ {
			reach *= k
			covered += reach
		}
		if d := tr.depth(); d > bound {
			t.Fatalf("trial %d (n=%d k=%d voters=%d): depth %d > %d", trial, n, k, nv, d, bound)
		}
	}
}
