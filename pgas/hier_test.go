package pgas

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport/mem"
)

// layout is a named placement of a job's processes on hosts, and on racks.
type layout struct {
	name         string
	hosts, racks []string
}

// placements returns named host layouts of n processes: one host (no
// labels: the flat algorithms), a host each (flat too), pairs, two hosts
// round robin, and a seeded random spread over three hosts; then, with
// a rack level, a host each, pairs and a random spread over five hosts,
// their hosts two to a rack.
func placements(n int) []layout {
	each, pairs, rr, random, five := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	eachRack, pairsRack, fiveRack := make([]string, n), make([]string, n), make([]string, n)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range n {
		each[i] = fmt.Sprintf("h%d", i)
		pairs[i] = fmt.Sprintf("h%d", i/2)
		rr[i] = fmt.Sprintf("h%d", i%2)
		random[i] = fmt.Sprintf("h%d", rng.IntN(3))
		h := rng.IntN(5)
		five[i] = fmt.Sprintf("h%d", h)
		eachRack[i], pairsRack[i], fiveRack[i] = fmt.Sprintf("r%d", i/2), fmt.Sprintf("r%d", i/4), fmt.Sprintf("r%d", h/2)
	}
	return []layout{{"one-host", nil, nil}, {"host-each", each, nil}, {"pairs", pairs, nil}, {"round-robin", rr, nil}, {"random", random, nil},
		{"racks-host-each", each, eachRack}, {"racks-pairs", pairs, pairsRack}, {"racks-random", five, fiveRack}}
}

// inputs gives rank r's vector: values of widely spread magnitudes, so
// that any change of the combine order changes the bits of the sum.
func inputs(r, size int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), 99))
	data := make([]float64, size)
	for i := range data {
		data[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
	}
	return data
}

// Rule (docs/design.md §6.2): Allreduce gives the same bits for the same group
// size whatever the placement of ranks on hosts (two levels or flat) and
// whatever the delivery order; the two-level path's order is the flat
// algorithm's.
func TestAllreduceSameBitsAnyPlacement(t *testing.T) {
	for _, n := range []int{3, 4, 5, 6, 7, 8} {
		for _, size := range []int{1, 257, 6000} { // 6000 floats x 8 ranks is above hierGatherMax: flat
			var ref []float64
			for _, pl := range placements(n) {
				t.Run(fmt.Sprintf("ranks=%d/len=%d/%s", n, size, pl.name), func(t *testing.T) {
					got := make([][]float64, n)
					synctest.Test(t, func(t *testing.T) {
						rts, nw := newJob(t, n, int64(n*size), func(c *Config) { c.Hosts, c.Racks = pl.hosts, pl.racks })
						nw.Delay(mem.Any, mem.Any, 10*time.Microsecond, 300*time.Microsecond)
						each(t, rts, func(rt *Runtime) error {
							data := inputs(rt.Rank(), size)
							if err := Allreduce(context.Background(), rt, nil, data, OpSum); err != nil {
								return err
							}
							got[rt.Rank()] = data
							return nil
						})
					})
					for r := range n {
						if !bitsEqual(got[r], got[0]) {
							t.Fatalf("rank %d differs from rank 0", r)
						}
					}
					if ref == nil {
						ref = got[0]
					} else if !bitsEqual(got[0], ref) {
						t.Fatalf("bits differ from the one-host (flat) result")
					}
				})
			}
		}
	}
}

// matMul2 sets dst to dst x src, each four elements a 2x2 matrix: a
// product that is associative but not commutative, so any change of the
// combine order or of its operands' sides changes the result.
func matMul2(dst, src []float64) {
	for i := 0; i+3 < len(dst); i += 4 {
		a, b, c, d := dst[i], dst[i+1], dst[i+2], dst[i+3]
		e, f, g, h := src[i], src[i+1], src[i+2], src[i+3]
		dst[i], dst[i+1], dst[i+2], dst[i+3] = a*e+b*g, a*f+b*h, c*e+d*g, c*f+d*h
	}
}

// Rule: reduceInOrder is the flat algorithm's order, also for a reduction
// that is not commutative (dst must stay the lower operand).
func TestReduceInOrderMatchesFlat(t *testing.T) {
	for n := 1; n <= 9; n++ {
		synctest.Test(t, func(t *testing.T) {
			rts, _ := newJob(t, n, int64(n), nil)
			mul := matMul2
			vecs := make([][]byte, n)
			for r := range n {
				vecs[r] = asBytes(inputs(r, 8))
			}
			want := fromBytes[float64](reduceInOrder(vecs, func(dst, src []byte) { mul(fromBytes[float64](dst), fromBytes[float64](src)) }))
			each(t, rts, func(rt *Runtime) error {
				data := inputs(rt.Rank(), 8)
				if err := AllreduceFunc(context.Background(), rt, nil, data, mul); err != nil {
					return err
				}
				if !bitsEqual(data, want) {
					t.Errorf("ranks=%d: rank %d: flat %v, reduceInOrder %v", n, rt.Rank(), data, want)
				}
				return nil
			})
		})
	}
}

// Rule: Barrier, Bcast (binomial in two levels, and pipelined for large
// buffers) and Allgather (two levels, and the host-ordered ring) give the
// right result under every placement.
func TestCollectivesAnyPlacement(t *testing.T) {
	for _, n := range []int{3, 6} {
		for _, pl := range placements(n) {
			t.Run(fmt.Sprintf("ranks=%d/%s", n, pl.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rts, nw := newJob(t, n, int64(n), func(c *Config) { c.Hosts, c.Racks = pl.hosts, pl.racks })
					nw.Delay(mem.Any, mem.Any, 10*time.Microsecond, 300*time.Microsecond)
					ctx := context.Background()
					each(t, rts, func(rt *Runtime) error {
						for i := range 3 {
							if err := rt.Barrier(ctx, nil); err != nil {
								return fmt.Errorf("barrier %d: %w", i, err)
							}
						}
						for _, size := range []int{8, 1000, pipelineMin + pipelineChunk/2 + 3} {
							for root := range n {
								if size >= pipelineMin && root != 0 && root != n-1 {
									continue // the pipeline's chain is the same from any root; two suffice
								}
								buf := make([]byte, size)
								want := make([]byte, size)
								for i := range want {
									want[i] = byte(i*7 + root)
								}
								if rt.Rank() == root {
									copy(buf, want)
								}
								if err := rt.Bcast(ctx, nil, buf, root); err != nil {
									return fmt.Errorf("bcast of %d bytes from %d: %w", size, root, err)
								}
								if !bytes.Equal(buf, want) {
									return fmt.Errorf("bcast of %d bytes from %d: wrong data", size, root)
								}
							}
						}
						for _, size := range []int{1, 6000} { // 6 x 6000 x 8 bytes is above hierGatherMax: the ring
							block := make([]int64, size)
							for i := range block {
								block[i] = int64(rt.Rank()*1_000_000 + i)
							}
							out, err := Allgather(ctx, rt, nil, block)
							if err != nil {
								return fmt.Errorf("allgather of %d: %w", size, err)
							}
							for r := range n {
								for i := 0; i < size; i += max(1, size/7) {
									if got := out[r*size+i]; got != int64(r*1_000_000+i) {
										return fmt.Errorf("allgather of %d: element %d of rank %d is %d", size, i, r, got)
									}
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
