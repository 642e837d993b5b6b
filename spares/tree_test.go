package spares

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/spares/internal/tree"
)

func treeState(procs []uint32, voters []uint32, failed ...uint32) state {
	st := state{Epoch: 2, Failed: map[uint32]uint64{}, Voters: voters}
	for _, p := range procs {
		st.Procs.set(p, procInfo{Host: "h", CtlAddr: fmt.Sprintf("c%d", p), RaftAddr: fmt.Sprintf("r%d", p)})
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

// The tree of a state: failed processes (a failed voter too) and those
// without a control address are left out of it.
func TestTreeOfState(t *testing.T) {
	if noProc != tree.None {
		t.Fatalf("tree.None %d is not NoProc %d", tree.None, noProc)
	}
	// 3 voters (7, 3 and 2, which failed), fan-out 2, procs 0..9, proc 5
	// failed, proc 9 has no control address.
	st := treeState(seq(10), []uint32{7, 3, 2}, 5, 2)
	st.Procs.set(9, procInfo{Host: "h"})
	tr := newTree(&st, 2)
	if !slices.Equal(tr.Roots(), []uint32{3, 7}) || !slices.Equal(tr.Clients(), []uint32{0, 1, 4, 6, 8}) || tr.Fanout() != 2 {
		t.Fatalf("roots %v, clients %v, fan-out %d", tr.Roots(), tr.Clients(), tr.Fanout())
	}
	if p, q := tr.Parent(6), tr.Parent(8); p != 7 || q != 0 {
		t.Fatalf("Parent(6) = %d, Parent(8) = %d; want 7, 0", p, q)
	}
}
