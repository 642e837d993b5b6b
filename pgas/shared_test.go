package pgas

import (
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// The runtimes of one process share the view of equal Views (§13): built
// once per content, never per runtime, and never changed by what one
// runtime does with its own View or applies next.
func TestSharedViewByContent(t *testing.T) {
	mk := func() View { return View{Epoch: 3, Ranks: []transport.Proc{0, 4, 2, 3}, Failed: []transport.Proc{1}} }
	a, b := mk(), mk()
	va, vb := sharedView(a, 5, 5), sharedView(b, 5, 5)
	if va != vb {
		t.Fatal("two equal Views built two views: a simulation would hold one per rank")
	}
	// One runtime's View changes after it was applied: the shared view
	// must not see it.
	a.Ranks[1] = 1
	if vb.ranks[1] != 4 || vb.rankOf[4] != 1 || vb.rankOf[1] != -1 {
		t.Fatalf("a change to one runtime's View is visible in the shared view: ranks %v", vb.ranks)
	}
	// Another runtime applies another View: a view of its own.
	c := mk()
	c.Ranks[3] = transport.NoProc
	vc := sharedView(c, 5, 5)
	if vc == va || !slices.Equal(va.ranks, []transport.Proc{0, 4, 2, 3}) || len(va.live) != 4 {
		t.Fatalf("another View changed the shared one: %v, live %v", va.ranks, va.live)
	}
	// Other table sizes are other views.
	if sharedView(mk(), 5, 6) == va {
		t.Fatal("a view of 6 process ids shared with one of 5")
	}
}

// A View applied again, or another runtime's View with the same rank
// table (one slice, as the membership hands it out), finds the last view
// without encoding its content; any other field that differs is another
// view.
func TestSharedViewBySource(t *testing.T) {
	ranks := []transport.Proc{0, 1, 2, 3}
	a := View{Epoch: 7, Ranks: ranks}
	va := sharedView(a, 4, 4)
	if vb := sharedView(View{Epoch: 7, Ranks: ranks}, 4, 4); vb != va {
		t.Fatal("the same View built twice")
	}
	for _, other := range []View{
		{Epoch: 8, Ranks: ranks},
		{Epoch: 7, Ranks: ranks, Failed: []transport.Proc{3}},
		{Epoch: 7, Ranks: ranks, Finished: true},
		{Epoch: 7, Ranks: ranks[:3]},
	} {
		if v := sharedView(other, 4, 4); v == va || v.epoch != uint32(other.Epoch) || len(v.ranks) != len(other.Ranks) || v.finished != other.Finished {
			t.Fatalf("View %+v got the view of %+v", other, a)
		}
	}
	if sharedView(a, 4, 5) == va {
		t.Fatal("a view of 5 process ids shared with one of 4")
	}
}

// Segment size tables are shared by content and read-only: a rank that
// learnt other sizes has its own table, and the slice a table was built
// from can change without changing it.
func TestSizeTableShared(t *testing.T) {
	s := []int64{8, -1, 8, 16}
	a, b := newSizeTable(s), newSizeTable(slices.Clone(s))
	if a.h != b.h {
		t.Fatal("equal size tables not shared")
	}
	s[0] = 99
	if a.at(0) != 8 || b.len() != 4 || b.at(1) != -1 || b.at(3) != 16 {
		t.Fatalf("size table changed with its source: %d %d %d", a.at(0), b.at(1), b.at(3))
	}
	c := newSizeTable([]int64{8, 8, 8, 16})
	if c.h == a.h || a.at(1) != -1 || c.at(1) != 8 {
		t.Fatal("another rank's sizes are visible in a shared table")
	}
}

// When every member passes the same size, the size table is the size and
// the view's member list: O(1) per runtime, and the vacant ranks still
// read as not created.
func TestUniformSizeTable(t *testing.T) {
	members := []int{0, 1, 3}
	st := &sizeTable{size: 64, members: members, n: 4}
	for r, want := range []int64{64, 64, -1, 64} {
		if got := st.at(r); got != want {
			t.Errorf("rank %d: size %d, want %d", r, got, want)
		}
	}
	if st.len() != 4 {
		t.Errorf("len %d, want 4", st.len())
	}
}
