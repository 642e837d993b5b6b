package pgas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// oneHost puts every process on host "h" with segments shared: the
// collectives of small vectors run in a collective area.
func oneHost(n int) func(*Config) {
	return func(c *Config) {
		direct(c)
		c.Hosts = slices.Repeat([]string{"h"}, n)
	}
}

// Rule (docs/design.md §6.2): an allreduce in shared memory gives the bits
// of the flat algorithm through frames, for any group size, also for a
// reduction that is not commutative; a vector larger than a block goes by
// frames.
func TestShmAllreduceSameBits(t *testing.T) {
	directMapped(t)
	mul := matMul2
	for n := 2; n <= 8; n++ {
		for _, size := range []int{4, 256, 600} {
			t.Run(fmt.Sprintf("ranks=%d/len=%d", n, size), func(t *testing.T) {
				run := func(mut func(*Config)) (sum, prod [][]float64, shm uint64) {
					sum, prod = make([][]float64, n), make([][]float64, n)
					synctest.Test(t, func(t *testing.T) {
						rts, _ := newJob(t, n, int64(n), mut)
						each(t, rts, func(rt *Runtime) error {
							a, b := inputs(rt.Rank(), size), inputs(rt.Rank()+n, size)
							if err := Allreduce(context.Background(), rt, nil, a, OpSum); err != nil {
								return err
							}
							if err := AllreduceFunc(context.Background(), rt, nil, b, mul); err != nil {
								return err
							}
							sum[rt.Rank()], prod[rt.Rank()] = a, b
							return nil
						})
						shm = rts[0].Stats().ShmCollectives
					})
					return sum, prod, shm
				}
				refSum, refProd, _ := run(nil)
				sum, prod, shm := run(oneHost(n))
				if want := uint64(2); size*8 > collBlock {
					want = 0
					if shm != want {
						t.Fatalf("%d collectives in shared memory for a vector above a block", shm)
					}
				} else if shm != want {
					t.Fatalf("%d collectives in shared memory, want %d", shm, want)
				}
				for r := range n {
					if !bitsEqual(sum[r], refSum[0]) || !bitsEqual(prod[r], refProd[0]) {
						t.Fatalf("rank %d: the bits differ from the flat algorithm's through frames", r)
					}
				}
			})
		}
	}
}

// Barrier and Bcast in shared memory: a barrier holds every member until
// the last enters; a broadcast from each root gives its bytes everywhere.
func TestShmBarrierBcast(t *testing.T) {
	directMapped(t)
	const n = 4
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, n, 1, oneHost(n))
		ctx := context.Background()
		entered := make(chan int, n)
		each(t, rts, func(rt *Runtime) error {
			if rt.Rank() == 3 {
				time.Sleep(time.Second) // the last one in
			}
			entered <- rt.Rank()
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			if len(entered) != n {
				return fmt.Errorf("rank %d left the barrier with %d members in", rt.Rank(), len(entered))
			}
			for root := range n {
				buf := make([]byte, 100)
				if rt.Rank() == root {
					for i := range buf {
						buf[i] = byte(root*7 + i)
					}
				}
				if err := rt.Bcast(ctx, nil, buf, root); err != nil {
					return err
				}
				for i := range buf {
					if buf[i] != byte(root*7+i) {
						return fmt.Errorf("rank %d: byte %d from root %d = %d", rt.Rank(), i, root, buf[i])
					}
				}
			}
			return nil
		})
		if got := rts[1].Stats().ShmCollectives; got != 1+n {
			t.Fatalf("%d collectives in shared memory, want %d", got, 1+n)
		}
	})
}

// A member lost while the others wait in the area: they return its
// failure, none hangs.
func TestShmBarrierMemberLost(t *testing.T) {
	directMapped(t)
	const n = 3
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, n, 1, oneHost(n))
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) }) // the area is mapped
		errs := make(chan error, 2)
		for _, r := range []int{0, 1} {
			go func() { errs <- rts[r].Barrier(ctx, nil) }()
		}
		synctest.Wait()
		nw.Kill(2)
		for range 2 {
			var re *RankError
			if err := <-errs; !errors.As(err, &re) || re.Rank != 2 || !errors.Is(err, ErrRankFailed) {
				t.Fatalf("barrier without rank 2: %v", err)
			}
		}
	})
}

// A member that times out has stamped already: one that enters late
// completes, as over frames, and the early one's group is out of step.
func TestShmBarrierLateMember(t *testing.T) {
	directMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 1, oneHost(2))
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := rts[0].Barrier(tctx, nil); !errors.Is(err, ErrTimeout) {
			t.Fatalf("barrier alone: %v, want ErrTimeout", err)
		}
		if err := rts[1].Barrier(ctx, nil); err != nil {
			t.Fatalf("the late member: %v", err)
		}
		if err := rts[0].Barrier(ctx, nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("after a timeout: %v, want ErrInvalid (out of step)", err)
		}
		if n := rts[1].Stats().ShmCollectives; n != 2 {
			t.Fatalf("%d collectives in shared memory, want 2", n)
		}
	})
}
