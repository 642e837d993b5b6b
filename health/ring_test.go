package health

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

func ps(xs ...int) []transport.Proc {
	out := make([]transport.Proc, len(xs))
	for i, x := range xs {
		out[i] = transport.Proc(x)
	}
	return out
}

func goneSet(xs ...int) func(transport.Proc) bool {
	return func(p transport.Proc) bool { return slices.Contains(ps(xs...), p) }
}

func TestRingNeighbours(t *testing.T) {
	ring := ps(10, 11, 12, 13, 14, 15)
	tests := []struct {
		name       string
		i, r       int
		gone       []int
		succ, pred []transport.Proc
	}{
		{"plain", 0, 2, nil, ps(11, 12), ps(15, 14)},
		{"wrap", 5, 2, nil, ps(10, 11), ps(14, 13)},
		{"skip gone", 1, 2, []int{12, 10}, ps(13, 14), ps(15, 14)},
		{"r above n", 2, 9, nil, ps(13, 14, 15, 10, 11), ps(11, 10, 15, 14, 13)},
		{"all gone", 0, 2, []int{11, 12, 13, 14, 15}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := goneSet(tt.gone...)
			if got := ringSuccessors(ring, tt.i, tt.r, g); !slices.Equal(got, tt.succ) {
				t.Errorf("successors = %v, want %v", got, tt.succ)
			}
			if got := ringPredecessors(ring, tt.i, tt.r, g); !slices.Equal(got, tt.pred) {
				t.Errorf("predecessors = %v, want %v", got, tt.pred)
			}
		})
	}
}

func TestHelperOrder(t *testing.T) {
	ring := ps(0, 1, 2, 3, 4, 5, 6, 7)
	tests := []struct {
		name     string
		ring     []transport.Proc
		ti, r, k int
		gone     []int
		exclude  []int
		want     []transport.Proc
	}{
		// Observer 2 suspects 3: the other monitor (1) first, then 4, 0, 5, 7.
		{"monitors first", ring, 3, 2, 5, nil, []int{2}, ps(1, 4, 0, 5, 7)},
		{"limit", ring, 3, 2, 3, nil, []int{2}, ps(1, 4, 0)},
		{"suspects excluded", ring, 3, 2, 3, nil, []int{2, 4}, ps(1, 0, 5)},
		{"gone leave the ring", ring, 3, 2, 4, []int{1}, []int{2}, ps(0, 4, 7, 5)},
		{"small ring no duplicates", ps(0, 1, 2), 1, 2, 9, nil, nil, ps(0, 2)},
		{"nobody left", ps(0, 1), 1, 2, 9, nil, []int{0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := helperOrder(tt.ring, tt.ti, tt.r, tt.k, goneSet(tt.gone...), goneSet(tt.exclude...))
			if !slices.Equal(got, tt.want) {
				t.Errorf("helperOrder = %v, want %v", got, tt.want)
			}
		})
	}
}

// naiveHelperOrder is the reference: filter the ring down to live members,
// then index it with modular arithmetic.
func naiveHelperOrder(members []transport.Proc, ti, r, limit int, gone, exclude func(transport.Proc) bool) []transport.Proc {
	target := members[ti]
	var live []transport.Proc
	for _, p := range members {
		if p == target || !gone(p) {
			live = append(live, p)
		}
	}
	n := len(live)
	pos := slices.Index(live, target)
	var order []transport.Proc
	for d := 1; d <= r && d < n; d++ {
		order = append(order, live[((pos-d)%n+n)%n])
	}
	for d := 1; d < n; d++ {
		order = append(order, live[(pos+d)%n])
		if d+r < n {
			order = append(order, live[((pos-d-r)%n+n)%n])
		}
	}
	var out []transport.Proc
	for _, p := range order {
		if len(out) < limit && p != target && !exclude(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func TestRingDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + rng.IntN(12)
		members := make([]transport.Proc, n)
		for i, p := range rng.Perm(50)[:n] {
			members[i] = transport.Proc(p)
		}
		goneM, exclM := map[transport.Proc]bool{}, map[transport.Proc]bool{}
		for _, p := range members {
			goneM[p] = rng.IntN(4) == 0
			exclM[p] = rng.IntN(4) == 0
		}
		gone := func(p transport.Proc) bool { return goneM[p] }
		excl := func(p transport.Proc) bool { return exclM[p] }
		i, r, k := rng.IntN(n), 1+rng.IntN(3), 1+rng.IntN(8)
		if gone(members[i]) {
			continue // the target is never a gone member in the Core
		}
		got := helperOrder(members, i, r, k, gone, excl)
		want := naiveHelperOrder(members, i, r, k, gone, excl)
		if !slices.Equal(got, want) {
			t.Fatalf("members %v target %d r %d k %d gone %v excl %v:\n got  %v\n want %v",
				members, members[i], r, k, goneM, exclM, got, want)
		}
		// Successors: the next r live members after i, by filtering.
		var live []transport.Proc
		for d := 1; d < n; d++ {
			if p := members[(i+d)%n]; !gone(p) {
				live = append(live, p)
			}
		}
		if got, want := ringSuccessors(members, i, r, gone), live[:min(r, len(live))]; !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("successors of %d in %v (gone %v): %v, want %v", members[i], members, goneM, got, want)
		}
	}
}
