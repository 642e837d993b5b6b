package ckpt

import (
	"slices"
	"testing"
)

// Checkpointers of one process share the layout of equal inputs, and
// nothing one of them does changes another's: the layout is never
// written once built, and Holders hands out a copy.
func TestLayoutShared(t *testing.T) {
	hosts := []string{"a", "b", "a", "b", "c"}
	live := []int{0, 1, 2, 3, 4}
	l1 := sharedLayout(hosts, 2, live)
	l2 := sharedLayout(slices.Clone(hosts), 2, slices.Clone(live))
	if l1 != l2 {
		t.Fatal("equal inputs built two layouts: a simulation would hold one per rank")
	}
	want := slices.Clone(l1.holders[0])
	hosts[1], live[4] = "z", 3
	c := &Checkpointer{lay: l1}
	h := c.Holders(0)
	h[0] = 42
	if !slices.Equal(l2.holders[0], want) {
		t.Fatalf("a change by one rank is visible in the shared layout: holders %v, want %v", l2.holders[0], want)
	}
	// A shrunk job (rank 4 vacant) has a layout of its own.
	l3 := sharedLayout([]string{"a", "b", "a", "b", "c"}, 2, []int{0, 1, 2, 3})
	if l3 == l1 || len(l1.holders[4]) == 0 || len(l3.holders[4]) != 0 {
		t.Fatal("another live set shares or changes the layout")
	}
}
