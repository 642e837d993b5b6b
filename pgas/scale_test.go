package pgas

import (
	"context"
	"fmt"
	"math/bits"
	"testing"
	"testing/synctest"
)

// Rule: allgather gives every member every block in group order, by
// Bruck's algorithm for small totals and by the ring for large ones, at
// sizes that are and are not powers of two.
func TestAllgatherSizes(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 13} {
		for _, words := range []int{1, 3, hierGatherMax/8/n + 1} { // the last goes round the ring
			t.Run(fmt.Sprintf("n=%d/words=%d", n, words), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rts, _ := newJob(t, n, 3, nil)
					each(t, rts, func(rt *Runtime) error {
						me := rt.Rank()
						block := make([]uint64, words)
						for i := range block {
							block[i] = uint64(me)<<32 | uint64(i)
						}
						all, err := Allgather(context.Background(), rt, nil, block)
						if err != nil {
							return err
						}
						for r := range n {
							for i := range words {
								if got, want := all[r*words+i], uint64(r)<<32|uint64(i); got != want {
									return fmt.Errorf("rank %d: word %d of rank %d's block is %x, want %x", me, i, r, got, want)
								}
							}
						}
						return nil
					})
				})
			})
		}
	}
}

// Rule: a process keeps protocol state only for the peers it talked to:
// after collectives on a job of 256, each holds about 2 log2 N peers, not
// N (DESIGN §13, per-peer state only for peers you talk to).
func TestPeersOnlyForPartners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 256
		rts, _ := newJob(t, n, 4, nil)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error {
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			if _, err := Allgather(ctx, rt, nil, []int64{1}); err != nil {
				return err
			}
			return Allreduce(ctx, rt, nil, []float64{1}, OpSum)
		})
		limit := 3*bits.Len(n) + 2
		for _, rt := range rts {
			held := 0
			rt.peers.each(func(*peer) { held++ })
			if held > limit {
				t.Fatalf("process %d holds state for %d peers after collectives on %d ranks, want at most %d", rt.Proc(), held, n, limit)
			}
		}
	})
}
