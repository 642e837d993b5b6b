package pgas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport/mem"
)

func TestAllreduceDeterministic(t *testing.T) {
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			var ref [][]float64
			for seed := int64(0); seed < 4; seed++ {
				var got [][]float64
				synctest.Test(t, func(t *testing.T) {
					rts, nw := newJob(t, n, seed, nil)
					// Random per-frame delays shuffle arrival order across links.
					nw.Delay(mem.Any, mem.Any, 10*time.Microsecond, 500*time.Microsecond)
					got = make([][]float64, n)
					each(t, rts, func(rt *Runtime) error {
						rng := rand.New(rand.NewPCG(uint64(rt.Rank()), 99))
						data := make([]float64, 257)
						for i := range data {
							data[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
						}
						if err := Allreduce(context.Background(), rt, nil, data, OpSum); err != nil {
							return err
						}
						got[rt.Rank()] = data
						return nil
					})
				})
				for r := 1; r < n; r++ {
					if !bitsEqual(got[r], got[0]) {
						t.Fatalf("seed %d: rank %d differs from rank 0", seed, r)
					}
				}
				if ref == nil {
					ref = got
				} else if !bitsEqual(got[0], ref[0]) {
					t.Fatalf("seed %d: result bits differ from seed 0 under another delivery order", seed)
				}
			}
			// And it is the sum, up to rounding.
			want := make([]float64, 257)
			for r := 0; r < n; r++ {
				rng := rand.New(rand.NewPCG(uint64(r), 99))
				for i := range want {
					want[i] += rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15))
				}
			}
			for i := range want {
				if d := math.Abs(ref[0][i] - want[i]); d > 1e-9*math.Abs(want[i])+1e-300 {
					t.Fatalf("element %d = %g, want %g", i, ref[0][i], want[i])
				}
			}
		})
	}
}

func bitsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func TestCollectives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 5
		rts, nw := newJob(t, n, 7, nil)
		nw.Delay(mem.Any, mem.Any, 0, 300*time.Microsecond)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error {
			me := rt.Rank()
			mins := []int64{int64(me), int64(-me)}
			if err := Allreduce(ctx, rt, nil, mins, OpMin); err != nil {
				return err
			}
			if mins[0] != 0 || mins[1] != -(n-1) {
				return fmt.Errorf("min = %v", mins)
			}
			maxs := []uint64{uint64(me)}
			if err := Allreduce(ctx, rt, nil, maxs, OpMax); err != nil {
				return err
			}
			if maxs[0] != n-1 {
				return fmt.Errorf("max = %v", maxs)
			}
			// A non-commutative, associative user reduction: 2x2 matrix
			// products (mod 2^64) must come out in rank order.
			mat := func(r int) [4]uint64 { return [4]uint64{uint64(r + 2), uint64(3*r + 1), uint64(r * r), uint64(7 - r)} }
			mul := func(a, b [4]uint64) [4]uint64 {
				return [4]uint64{a[0]*b[0] + a[1]*b[2], a[0]*b[1] + a[1]*b[3], a[2]*b[0] + a[3]*b[2], a[2]*b[1] + a[3]*b[3]}
			}
			m := []uint64{0, 0, 0, 0}
			mm := mat(me)
			copy(m, mm[:])
			err := AllreduceFunc(ctx, rt, nil, m, func(dst, src []uint64) {
				r := mul([4]uint64(dst), [4]uint64(src))
				copy(dst, r[:])
			})
			if err != nil {
				return err
			}
			want := mat(0)
			for r := 1; r < n; r++ {
				want = mul(want, mat(r))
			}
			if [4]uint64(m) != want {
				return fmt.Errorf("ordered user reduction = %v, want %v", m, want)
			}
			buf := make([]byte, 10)
			if me == 3 {
				copy(buf, "from three")
			}
			if err := rt.Bcast(ctx, nil, buf, 3); err != nil {
				return err
			}
			if string(buf) != "from three" {
				return fmt.Errorf("bcast got %q", buf)
			}
			all, err := Allgather(ctx, rt, nil, []int64{int64(me * 10), int64(me)})
			if err != nil {
				return err
			}
			for r := 0; r < n; r++ {
				if all[2*r] != int64(r*10) || all[2*r+1] != int64(r) {
					return fmt.Errorf("allgather = %v", all)
				}
			}
			g, err := rt.NewGroup(5, []int{1, 3, 4})
			if err != nil {
				return err
			}
			if g.index(me) >= 0 {
				s := []float64{1}
				if err := Allreduce(ctx, rt, g, s, OpSum); err != nil {
					return err
				}
				if s[0] != 3 {
					return fmt.Errorf("group sum = %v", s)
				}
			} else if err := rt.Barrier(ctx, g); !errors.Is(err, ErrNotMember) {
				return fmt.Errorf("barrier on a foreign group: %v", err)
			}
			return rt.Barrier(ctx, nil)
		})
	})
}

func TestAtomicsUnderContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, per = 4, 50
		rts, nw := newJob(t, n, 8, nil)
		nw.Delay(mem.Any, mem.Any, 0, 100*time.Microsecond)
		createSeg(t, rts, 1, 64)
		ctx := context.Background()
		seen := make([][]uint64, n)
		each(t, rts, func(rt *Runtime) error {
			for i := 0; i < per; i++ {
				old, err := rt.FetchAdd(ctx, 0, Loc{1, 8}, 1)
				if err != nil {
					return err
				}
				seen[rt.Rank()] = append(seen[rt.Rank()], old)
			}
			// A CAS spin lock guarding a non-atomic counter at offset 16.
			for i := 0; i < 10; i++ {
				for {
					prev, err := rt.CompareSwap(ctx, 0, Loc{1, 0}, 0, uint64(rt.Rank()+1))
					if err != nil {
						return err
					}
					if prev == 0 {
						break
					}
				}
				q := Queue(1)
				if err := rt.Read(ctx, q, 0, Loc{1, 16}, Loc{1, 24}, 8); err != nil {
					return err
				}
				if err := rt.Wait(ctx, q); err != nil {
					return err
				}
				seg, _ := rt.Segment(1)
				w, _ := seg.Uint64s(16, 2)
				w[1]++
				if err := rt.Write(ctx, q, 0, Loc{1, 16}, Loc{1, 24}, 8); err != nil {
					return err
				}
				if err := rt.Wait(ctx, q); err != nil {
					return err
				}
				if prev, err := rt.CompareSwap(ctx, 0, Loc{1, 0}, uint64(rt.Rank()+1), 0); err != nil || prev != uint64(rt.Rank()+1) {
					return fmt.Errorf("unlock: prev %d, %v", prev, err)
				}
			}
			return nil
		})
		s0, _ := rts[0].Segment(1)
		w, _ := s0.Uint64s(0, 3)
		if w[1] != n*per {
			t.Fatalf("counter = %d, want %d", w[1], n*per)
		}
		if w[2] != n*10 {
			t.Fatalf("lock-protected counter = %d, want %d (lost updates)", w[2], n*10)
		}
		distinct := map[uint64]bool{}
		for _, s := range seen {
			for _, v := range s {
				if distinct[v] {
					t.Fatalf("FetchAdd returned %d twice", v)
				}
				distinct[v] = true
			}
		}
	})
}

func TestPassive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 3, 9, nil)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error {
			if rt.Rank() != 0 {
				return rt.PassiveSend(ctx, 0, []byte(fmt.Sprintf("hi from %d", rt.Rank())))
			}
			got := map[int]string{}
			for len(got) < 2 {
				from, msg, err := rt.PassiveReceive(ctx)
				if err != nil {
					return err
				}
				got[from] = string(msg)
			}
			if got[1] != "hi from 1" || got[2] != "hi from 2" {
				return fmt.Errorf("got %v", got)
			}
			return nil
		})
	})
}
