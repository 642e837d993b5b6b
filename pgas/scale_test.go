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
	for _, n := range []int{1, 2, 3, 5, 8, 13, treeMin, treeMin + 7} {
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
// N (docs/design.md §13, per-peer state only for peers you talk to).
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

// Rule: the tree allreduce (treeMin members and more) combines in the
// same order as recursive doubling and the two-level path
// (reduceInOrder), so its bits are the same: checked with float sums
// whose rounding depends on the order, and with a non-commutative
// reduction (2x2 matrix products).
func TestTreeAllreduceOrder(t *testing.T) {
	for _, n := range []int{treeMin, treeMin + 1, treeMin + 37} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rts, _ := newJob(t, n, 5, nil)
				val := func(r int) float64 { return 1/float64(r+3) + float64(r%7)*1e15 }
				mat := func(r int) [4]uint64 { return [4]uint64{uint64(r) + 1, 2, uint64(r) * 3, 1} }
				mul := func(a, b [4]uint64) [4]uint64 {
					return [4]uint64{a[0]*b[0] + a[1]*b[2], a[0]*b[1] + a[1]*b[3], a[2]*b[0] + a[3]*b[2], a[2]*b[1] + a[3]*b[3]}
				}
				vecs, mats := make([][]byte, n), make([][]byte, n)
				for r := range n {
					vecs[r] = asBytes([]float64{val(r)})
					m := mat(r)
					mats[r] = asBytes(m[:])
				}
				wantSum := fromBytes[float64](reduceInOrder(vecs, func(dst, src []byte) {
					fromBytes[float64](dst)[0] += fromBytes[float64](src)[0]
				}))[0]
				wantMat := [4]uint64(fromBytes[uint64](reduceInOrder(mats, func(dst, src []byte) {
					d := fromBytes[uint64](dst)
					copy(d, func() []uint64 { m := mul([4]uint64(d), [4]uint64(fromBytes[uint64](src))); return m[:] }())
				})))
				ctx := context.Background()
				each(t, rts, func(rt *Runtime) error {
					s := []float64{val(rt.Rank())}
					if err := Allreduce(ctx, rt, nil, s, OpSum); err != nil {
						return err
					}
					if s[0] != wantSum {
						return fmt.Errorf("rank %d: sum %v, want %v (bits differ)", rt.Rank(), s[0], wantSum)
					}
					m := mat(rt.Rank())
					if err := AllreduceFunc(ctx, rt, nil, m[:], func(dst, src []uint64) {
						p := mul([4]uint64(dst), [4]uint64(src))
						copy(dst, p[:])
					}); err != nil {
						return err
					}
					if m != wantMat {
						return fmt.Errorf("rank %d: ordered product %v, want %v", rt.Rank(), m, wantMat)
					}
					return nil
				})
			})
		})
	}
}
