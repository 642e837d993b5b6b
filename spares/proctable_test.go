package spares

import (
	"fmt"
	"reflect"
	"testing"
)

// Every node of one process that starts from the same member table
// shares one process table, rank table and tree, and a change on one node (a joiner) is never
// visible on another.
func TestProcTableShared(t *testing.T) {
	members := make([]Member, 6)
	for i := range members {
		members[i] = Member{Proc: uint32(i), Host: "h", Addr: fmt.Sprint("d", i), CtlAddr: fmt.Sprint("c", i), RaftAddr: fmt.Sprint("r", i), Spare: i >= 4}
	}
	a, err := initialState(members, 4, false, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := initialState(append([]Member(nil), members...), 4, false, 0, 3)
	if a.Procs.base == nil || a.Procs.base != b.Procs.base {
		t.Fatal("two nodes' equal member tables are not shared")
	}
	if a.Ranks != b.Ranks || newTree(&a, 8) != newTree(&b, 8) {
		t.Fatal("two nodes' equal rank tables or trees are not shared")
	}
	c := b.Clone()
	c.Ranks = c.Ranks.with(0, 5)
	if a.Ranks.at(0) != 0 || b.Ranks.at(0) != 0 || c.Ranks.at(0) != 5 || newTree(&c, 8) != newTree(&a, 8) {
		t.Fatal("a rank moved on one node is visible on another")
	}
	c.Procs.set(9, procInfo{Host: "h2", CtlAddr: "c9"})
	if a.Procs.has(9) || b.Procs.has(9) || a.Procs.len() != 6 || !c.Procs.has(9) || c.Procs.info(9).Host != "h2" {
		t.Fatal("a joiner added on one node is visible on another")
	}
	c.Procs.set(0, procInfo{Host: "x"})
	if a.Procs.info(0).Host != "h" || a.Procs.info(0).Addr != "d0" {
		t.Fatal("a change to a shared entry is visible on another node")
	}
	// The snapshot of a state decodes to the same shared table.
	enc, err := encodeState(&a)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeState(enc)
	if err != nil {
		t.Fatal(err)
	}
	if d.Procs.base != a.Procs.base || !reflect.DeepEqual(d.Procs, a.Procs) {
		t.Fatal("a decoded snapshot does not share the table it encodes")
	}
}

// Nodes started from the same member slice share its validation and the
// first state's tables; a caller that changes its slice afterwards
// changes neither what the nodes started from nor what they keep.
func TestStartTableShared(t *testing.T) {
	members := make([]Member, 5)
	for i := range members {
		members[i] = Member{Proc: uint32(i), Host: "h", CtlAddr: fmt.Sprint("c", i), RaftAddr: fmt.Sprint("r", i), Spare: i == 4}
	}
	a, b := startOf(members, 4), startOf(members, 4)
	if a != b || a.err != nil {
		t.Fatalf("the same member slice gave two start tables (or %v)", a.err)
	}
	members[1].Host = "h2"
	c := startOf(members, 4)
	if c == a || a.members[1].Host != "h" || c.members[1].Host != "h2" {
		t.Fatal("a change to the caller's slice is visible in a start table, or not seen by the next node")
	}
	if startOf(members, 3).err == nil {
		t.Fatal("4 non-spares accepted for 3 ranks")
	}
	va := a.votersFor(3)
	va[0] = 99
	if a.votersFor(3)[0] == 99 {
		t.Fatal("a node's voters change the start table's")
	}
}
