package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTreeTable(t *testing.T) {
	// 2 voters (7 and 3), fan-out 2, procs 0..9; 5 and 9 are outside the
	// tree (failed, or without a control address: the caller leaves them
	// out).
	tr := New([]uint32{7, 3}, []uint32{8, 0, 1, 2, 4, 6}, 2)
	if want := []uint32{3, 7, 0, 1, 2, 4, 6, 8}; !slices.Equal(tr.order, want) {
		t.Fatalf("order %v, want %v", tr.order, want)
	}
	if !slices.Equal(tr.Roots(), []uint32{3, 7}) || !slices.Equal(tr.Clients(), []uint32{0, 1, 2, 4, 6, 8}) || tr.Fanout() != 2 {
		t.Fatalf("roots %v, clients %v, fan-out %d", tr.Roots(), tr.Clients(), tr.Fanout())
	}
	for _, c := range []struct {
		proc     uint32
		parent   uint32
		children []uint32
		upstream []uint32
	}{
		{3, None, []uint32{0, 1}, []uint32{7}},
		{7, None, []uint32{2, 4}, []uint32{3}},
		{0, 3, []uint32{6, 8}, []uint32{3, 7}},
		{1, 3, nil, []uint32{3, 7}},
		{2, 7, nil, []uint32{7, 3}},
		{4, 7, nil, []uint32{7, 3}},
		{6, 0, nil, []uint32{0, 3, 7}},
		{8, 0, nil, []uint32{0, 3, 7}},
		{5, None, nil, []uint32{3, 7}}, // outside the tree: asks the voters
		{9, None, nil, []uint32{3, 7}},
	} {
		if p := tr.Parent(c.proc); p != c.parent {
			t.Errorf("Parent(%d) = %d, want %d", c.proc, p, c.parent)
		}
		if ch := tr.Children(c.proc); !slices.Equal(ch, c.children) {
			t.Errorf("Children(%d) = %v, want %v", c.proc, ch, c.children)
		}
		if up := tr.Upstream(c.proc); !slices.Equal(up, c.upstream) {
			t.Errorf("Upstream(%d) = %v, want %v", c.proc, up, c.upstream)
		}
	}
	if d := tr.Depth(); d != 2 {
		t.Errorf("depth %d, want 2", d)
	}
	// No voters: nobody has a parent; everyone asks nobody in particular.
	if tr := New(nil, []uint32{0, 1, 2, 3}, 3); tr.Parent(2) != None || len(tr.Upstream(2)) != 0 || tr.Depth() != 0 {
		t.Errorf("tree without voters: parent %d upstream %v", tr.Parent(2), tr.Upstream(2))
	}
}

// naiveTree assigns the clients one by one, breadth first, to the first
// process (voters first) that has fewer than k children.
func naiveTree(voters, clients []uint32, k int) map[uint32]uint32 {
	voters, clients = slices.Sorted(slices.Values(voters)), slices.Sorted(slices.Values(clients))
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
		parent[v] = None
	}
	return parent
}

// The tree against the naive reference, on random layouts; and its cost:
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
		voters, clients := slices.Clone(procs[:nv]), slices.Clone(procs[nv:])
		tr := New(voters, clients, k)
		want := naiveTree(voters, clients, k)
		kids := map[uint32]int{}
		for p, wp := range want {
			if got := tr.Parent(p); got != wp {
				t.Fatalf("trial %d (n=%d k=%d): Parent(%d) = %d, naive %d", trial, n, k, p, got, wp)
			}
			if wp != None {
				kids[wp]++
				if !slices.Contains(tr.Children(wp), p) {
					t.Fatalf("trial %d: %d not among Children(%d) = %v", trial, p, wp, tr.Children(wp))
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
		if d := tr.Depth(); d > bound {
			t.Fatalf("trial %d (n=%d k=%d voters=%d): depth %d > %d", trial, n, k, nv, d, bound)
		}
	}
}
