package pgas

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// Rule: a rack level groups hosts by their leader's rack label, numbers
// racks by their lowest host, puts a process beyond the labels on a rack
// of its own, and is kept only where it pays (more than one rack, one of
// them with more than one host).
func TestPlaceOnRacks(t *testing.T) {
	v := &view{ranks: []transport.Proc{0, 1, 2, 3, 4, 5, 6}}
	hosts := []string{"a", "a", "b", "c", "c", "d"}
	ranks := []int{0, 1, 2, 3, 4, 5, 6} // rank 6 is process 6, beyond the labels
	for _, tc := range []struct {
		name   string
		racks  []string
		want   [][]int // hosts of each rack; nil: no rack level
		rackOf []int
	}{
		{"two racks", []string{"x", "x", "y", "x", "x", "y"}, [][]int{{0, 2}, {1, 3}, {4}}, []int{0, 1, 0, 1, 2}},
		{"one rack", []string{"x", "x", "x", "x", "x", "x"}, [][]int{{0, 1, 2, 3}, {4}}, []int{0, 0, 0, 0, 1}},
		{"a rack each", []string{"w", "w", "x", "y", "y", "z"}, nil, nil},
		{"no labels", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := placeOnHosts(ranks, v, hosts)
			topo.placeOnRacks(ranks, v, tc.racks)
			if !equalLists(topo.racks, tc.want) || !slices.Equal(topo.rackOf, tc.rackOf) {
				t.Fatalf("racks %v (rackOf %v), want %v (%v)", topo.racks, topo.rackOf, tc.want, tc.rackOf)
			}
		})
	}
	// With one process a host, the rack level alone makes the levels pay.
	one := placeOnHosts([]int{0, 1, 2}, v, []string{"a", "b", "c", "d", "e", "f"})
	one.placeOnRacks([]int{0, 1, 2}, v, []string{"x", "x", "y", "y", "y", "y"})
	if !one.twoLevel() || len(one.racks) != 2 {
		t.Fatalf("a host each on two racks: racks %v, twoLevel %v; want two racks and the levels", one.racks, one.twoLevel())
	}
}

func equalLists(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

// Rule (docs/design.md §6.3): with a rack level, only the racks' leaders
// send frames across racks, and the collectives give the flat algorithm's
// results (Allreduce its bits: TestAllreduceSameBitsAnyPlacement).
func TestOnlyRackLeadersTalkAcrossRacks(t *testing.T) {
	// 12 processes, 2 a host, 6 hosts, 3 hosts a rack: rack leaders are
	// processes 0 and 6.
	const n = 12
	hosts, racks := make([]string, n), make([]string, n)
	for p := range n {
		hosts[p], racks[p] = fmt.Sprintf("h%d", p/2), fmt.Sprintf("r%d", p/6)
	}
	// The rack leaders are processes 0 and 6; a broadcast's root heads its
	// own rack (as its own host), so from 9 the heads are 0 and 9.
	heads := []transport.Proc{0, 6}
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, n, 1, func(c *Config) { c.Hosts, c.Racks = hosts, racks })
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) }) // connections up
		var mu sync.Mutex
		var across []string
		nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			mu.Lock()
			defer mu.Unlock()
			if h.Type == transport.FrameColl && racks[from] != racks[to] && !(slices.Contains(heads, from) && slices.Contains(heads, to)) {
				across = append(across, fmt.Sprintf("%d->%d", from, to))
			}
			return mem.Deliver
		})
		each(t, rts, func(rt *Runtime) error {
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			data := []int64{int64(rt.Rank() + 1)}
			if err := Allreduce(ctx, rt, nil, data, OpSum); err != nil {
				return err
			}
			if data[0] != n*(n+1)/2 {
				return fmt.Errorf("allreduce: %d, want %d", data[0], n*(n+1)/2)
			}
			if err := bcastCheck(ctx, rt, 6); err != nil {
				return err
			}
			out, err := Allgather(ctx, rt, nil, []int64{int64(rt.Rank())})
			if err != nil {
				return err
			}
			for r, x := range out {
				if x != int64(r) {
					return fmt.Errorf("allgather: position %d holds %d", r, x)
				}
			}
			return nil
		})
		mu.Lock()
		heads = []transport.Proc{0, 9}
		mu.Unlock()
		each(t, rts, func(rt *Runtime) error { return bcastCheck(ctx, rt, 9) })
		nw.BeforeFrame(nil)
		if len(across) > 0 {
			t.Fatalf("collective frames across racks between processes that do not lead them: %v", across)
		}
	})
}

// bcastCheck broadcasts 64 bytes from root and checks them.
func bcastCheck(ctx context.Context, rt *Runtime, root int) error {
	buf := make([]byte, 64)
	if rt.Rank() == root {
		buf[0] = byte(root)
	}
	if err := rt.Bcast(ctx, nil, buf, root); err != nil {
		return err
	}
	if buf[0] != byte(root) {
		return fmt.Errorf("bcast from %d: got %d", root, buf[0])
	}
	return nil
}
