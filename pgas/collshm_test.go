package pgas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/transport"
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

// areaFault is a transport that answers this process's requests for a
// collective area with what fetch returns, without asking the owner.
type areaFault struct {
	nearMem
	fetch func() (int, error)
}

func (f areaFault) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	if key&collKind != 0 {
		fd, err := f.fetch()
		return fd, 0, err
	}
	return f.nearMem.FetchMemory(ctx, peer, key)
}

// testMemfd makes a memfd of size bytes with seals (0: none).
func testMemfd(size int64, seals int) (int, error) {
	fd, err := unix.MemfdCreate("test-coll", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Rule (docs/design.md §9.3.1): a member that has no collective area (it
// could not map it, was handed a memfd it must not map, the owner would
// not hand it over, or the owner could not make it) makes the whole group
// use frames in that epoch: every member's barrier, allreduce and
// broadcast return their results, within a bound, and none met in an area.
func TestCollAreaNotMapped(t *testing.T) {
	directMapped(t)
	const n, bound = 3, time.Minute
	size := collAreaSize(n)
	for _, tc := range []struct {
		name  string
		fetch func() (int, error)     // what rank 2 gets for the area
		hook  func(rt *Runtime) error // collMapHook
	}{
		{name: "unsealed", fetch: func() (int, error) { return testMemfd(size, 0) }},
		{name: "short", fetch: func() (int, error) { return testMemfd(size-int64(unix.Getpagesize()), collSeals) }},
		{name: "refused", fetch: func() (int, error) { return -1, errors.New("refused") }},
		{name: "member", hook: func(rt *Runtime) error {
			if rt.Rank() == 2 {
				return errors.New("mapping failed")
			}
			return nil
		}},
		{name: "owner", hook: func(rt *Runtime) error {
			if rt.Rank() == 0 {
				return errors.New("memfd failed")
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.hook != nil {
				collMapHook = tc.hook
				t.Cleanup(func() { collMapHook = nil })
			}
			synctest.Test(t, func(t *testing.T) {
				rts, _ := newJob(t, n, 1, func(c *Config) {
					oneHost(n)(c)
					if tc.fetch != nil && c.Proc == 2 {
						c.Transport = areaFault{c.Transport.(nearMem), tc.fetch}
					}
				})
				start := time.Now()
				each(t, rts, func(rt *Runtime) error {
					ctx, cancel := context.WithTimeout(context.Background(), bound)
					defer cancel()
					for range 2 {
						if err := rt.Barrier(ctx, nil); err != nil {
							return err
						}
						v := []int64{int64(rt.Rank()) + 1, 10}
						if err := Allreduce(ctx, rt, nil, v, OpSum); err != nil {
							return err
						}
						if v[0] != n*(n+1)/2 || v[1] != 10*n {
							return fmt.Errorf("allreduce gave %v", v)
						}
						buf := []byte{byte(rt.Rank())}
						if err := rt.Bcast(ctx, nil, buf, 1); err != nil {
							return err
						}
						if buf[0] != 1 {
							return fmt.Errorf("bcast from rank 1 gave %d", buf[0])
						}
					}
					return nil
				})
				if d := time.Since(start); d >= bound {
					t.Fatalf("the collectives took %v", d)
				}
				for r, rt := range rts {
					if got := rt.Stats().ShmCollectives; got != 0 {
						t.Fatalf("rank %d ran %d collectives in an area that a member lacks", r, got)
					}
				}
			})
		})
	}
}

// Rule (docs/design.md §6.4): members that pass different sizes to an
// allreduce or a broadcast all get ErrInvalid, also where some sizes fit
// a block of the area and others go by frames, and the group stays in
// step: the next collective works.
func TestCollSizesDiffer(t *testing.T) {
	directMapped(t)
	const n, bound = 3, time.Minute
	const in, out = collBlock, collBlock + 8
	for _, tc := range []struct {
		name  string
		bcast bool
		sizes [n]int
	}{
		{"allreduce/straddle", false, [n]int{in, out, out}},
		{"allreduce/straddle-other-way", false, [n]int{out, in, out}},
		{"allreduce/in-blocks", false, [n]int{64, 64, 128}},
		{"allreduce/above-blocks", false, [n]int{out, out + 8, out}},
		{"bcast/straddle", true, [n]int{in, in, out}},
		{"bcast/in-blocks", true, [n]int{100, 200, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rts, _ := newJob(t, n, 1, oneHost(n))
				start := time.Now()
				each(t, rts, func(rt *Runtime) error {
					ctx, cancel := context.WithTimeout(context.Background(), bound)
					defer cancel()
					buf := make([]byte, tc.sizes[rt.Rank()])
					var err error
					if tc.bcast {
						err = rt.Bcast(ctx, nil, buf, 0)
					} else {
						err = rt.AllreduceBytes(ctx, nil, buf, func(dst, src []byte) {})
					}
					if !errors.Is(err, ErrInvalid) {
						return fmt.Errorf("sizes %v: %v, want ErrInvalid", tc.sizes, err)
					}
					v := []uint64{uint64(rt.Rank())}
					if err := Allreduce(ctx, rt, nil, v, OpMax); err != nil || v[0] != n-1 {
						return fmt.Errorf("the allreduce after: %v, %v", v, err)
					}
					return nil
				})
				if d := time.Since(start); d >= bound {
					t.Fatalf("the collectives took %v", d)
				}
			})
		})
	}
}

// The collective area's memfd is sealed: a member given it cannot shrink
// it under the owner's mapping (nor grow it), and a member maps only a
// memfd of the area's size sealed against shrinking.
func TestCollAreaSealed(t *testing.T) {
	directMapped(t)
	const n = 3
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, n, 1, oneHost(n))
		epoch := rts[0].view.Load().epoch
		fd, _, err := rts[0].provideArea(collKey(7, n, epoch), epoch)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		size := collAreaSize(n)
		for _, to := range []int64{0, size / 2, size - 1, 2 * size} {
			if err := unix.Ftruncate(fd, to); err == nil {
				t.Fatalf("a member resized the area from %d to %d bytes", size, to)
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Size != size {
			t.Fatalf("the area is %d bytes (%v), want %d", st.Size, err, size)
		}
		own, err := rts[0].ownArea(collKey(7, n, epoch), n)
		if err != nil {
			t.Fatal(err)
		}
		own.mem[len(own.mem)-1] = 9 // the owner's last page is still there
		a, err := mapCollArea(fd, n)
		if err != nil {
			t.Fatalf("map the sealed area: %v", err)
		}
		if a.mem[len(a.mem)-1] != 9 {
			t.Fatal("the member's mapping is not the owner's memory")
		}
		a.retire()
		if _, err := mapCollArea(fd, n+1); err == nil && collAreaSize(n+1) != size {
			t.Fatal("mapped an area of the wrong size")
		}
		for _, bad := range []struct {
			size  int64
			seals int
		}{{size, 0}, {size, unix.F_SEAL_GROW}, {size - int64(unix.Getpagesize()), collSeals}, {size + int64(unix.Getpagesize()), collSeals}} {
			fd, err := testMemfd(bad.size, bad.seals)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := mapCollArea(fd, n); err == nil {
				a.retire()
				t.Fatalf("mapped a memfd of %d bytes with seals %#x", bad.size, bad.seals)
			}
			unix.Close(fd)
		}
	})
}
