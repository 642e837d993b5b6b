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

	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
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
				if want := uint64(2); size*8 > segments.CollBlock {
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
	if key&samehost.CollKind != 0 {
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

// areaFileSize is the size of the memfd that holds the area of n members.
func areaFileSize(t *testing.T, n int) int64 {
	b := segments.NewMemfdBacking()
	seg, err := segments.New(0, segments.CollAreaSize(n), segments.Options{Backing: b})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	fd, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size
}

const areaSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL

// Rule (docs/design.md §9.3.1): a member that has no collective area (it
// could not map it, was handed a memfd it must not map, the owner would
// not hand it over, or the owner could not make it) sends the no-area
// mark, and the group goes by frames in that epoch: every member's
// barrier, allreduce and broadcast return their results within a bound,
// and none finished in an area.
func TestCollAreaNotMapped(t *testing.T) {
	directMapped(t)
	const n, bound = 3, time.Minute
	size := areaFileSize(t, n)
	for _, tc := range []struct {
		name  string
		fetch func() (int, error)     // what rank 2 gets for the area
		hook  func(rt *Runtime) error // collMapHook
		quick bool                    // rank 2 gives up at once, not after samehost.ShareTimeout
	}{
		{name: "unsealed", fetch: func() (int, error) { return testMemfd(size, 0) }},
		{name: "short", fetch: func() (int, error) { return testMemfd(size-int64(unix.Getpagesize()), areaSeals) }},
		{name: "refused", fetch: func() (int, error) { return -1, errors.New("refused") }},
		{name: "not-near", quick: true, fetch: func() (int, error) { return -1, fmt.Errorf("route: %w", transport.ErrNoSharedMemory) }},
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
				if d := time.Since(start); d >= bound || (tc.quick && d >= samehost.ShareTimeout) {
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

// A member whose mark arrives while the others already wait in the area
// (they stamped the collective) moves them to frames for that same
// collective; and a member that enters after the mark arrived goes by
// frames at once, never stamping.
func TestCollNoAreaMarkWhileWaiting(t *testing.T) {
	directMapped(t)
	const n = 3
	t.Cleanup(func() { collMapHook = nil })
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		collMapHook = func(rt *Runtime) error {
			if rt.Rank() == 2 {
				<-release // the others stamp and wait first
				return errors.New("mapping failed")
			}
			return nil
		}
		rts, _ := newJob(t, n, 1, oneHost(n))
		ctx := context.Background()
		errs := make(chan error, n)
		for _, r := range []int{0, 2} {
			go func() { errs <- rts[r].Barrier(ctx, nil) }()
		}
		synctest.Wait() // rank 0 waits in the area, rank 2 in its mapping
		key := samehost.AreaKey(0, n, rts[0].view.Load().epoch)
		if rts[0].coll.NoArea(key) {
			t.Fatal("a mark before the mapping failed")
		}
		close(release)
		synctest.Wait() // rank 0 and 2 wait on rank 1's frames; rank 1 holds the mark
		if !rts[1].coll.NoArea(key) {
			t.Fatal("rank 1 did not get the mark")
		}
		go func() { errs <- rts[1].Barrier(ctx, nil) }()
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := rts[1].Stats().ShmCollectives; got != 0 {
			t.Fatalf("rank 1 ran %d collectives in the area", got)
		}
		if rts[1].GroupAll().shm != nil {
			t.Fatal("rank 1 mapped the area after the mark arrived")
		}
		each(t, rts, func(rt *Runtime) error {
			v := []uint64{uint64(rt.Rank())}
			if err := Allreduce(ctx, rt, nil, v, OpMax); err != nil || v[0] != n-1 {
				return fmt.Errorf("the allreduce after: %v, %v", v, err)
			}
			return nil
		})
	})
}

// A no-area mark belongs to its epoch: one of an older epoch than the
// view is dropped on receipt, and a view change drops those it held.
func TestCollNoAreaMarkEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 1, 1, nil)
		rt := rts[0]
		e := rt.view.Load().epoch
		key := samehost.AreaKey(7, 3, e)
		rt.recordNoArea(key)
		if !rt.coll.NoArea(key) {
			t.Fatal("the mark of the current epoch was not held")
		}
		rt.coll.Retire(e + 1)
		if rt.coll.NoArea(key) {
			t.Fatal("a view change kept the mark of an older epoch")
		}
		v := rt.view.Load()
		rt.view.Store(&view{epoch: e + 1, ranks: v.ranks, rankOf: v.rankOf, failed: v.failed, live: v.live})
		rt.recordNoArea(key)
		if rt.coll.NoArea(key) {
			t.Fatal("a mark of an older epoch was held")
		}
	})
}

// Rule (docs/design.md §6.4): members that pass different sizes to an
// allreduce or a broadcast in a group on one host all get ErrInvalid,
// also where some sizes fit a block of the area and others do not, and
// the group stays in step: the next collective works.
func TestCollSizesDiffer(t *testing.T) {
	directMapped(t)
	const n, bound = 3, time.Minute
	const in, out = segments.CollBlock, segments.CollBlock + 8
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
					big := make([]byte, out)
					big[0] = byte(rt.Rank())
					if err := rt.Bcast(ctx, nil, big, 2); err != nil || big[0] != 2 {
						return fmt.Errorf("a broadcast above a block after: %d, %v", big[0], err)
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
// it under the owner's mapping, and a member maps only a memfd of the
// area's size sealed against shrinking (segments.MapFD), so the "unsealed"
// and "short" cases of TestCollAreaNotMapped are refused there.
func TestCollAreaSealed(t *testing.T) {
	directMapped(t)
	const n = 3
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, n, 1, oneHost(n))
		epoch := rts[0].view.Load().epoch
		key := samehost.AreaKey(7, n, epoch)
		fd, _, err := rts[0].provideArea(key, epoch)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		size := areaFileSize(t, n)
		for _, to := range []int64{0, size / 2, size - 1} {
			if err := unix.Ftruncate(fd, to); err == nil {
				t.Fatalf("a member shrank the area from %d to %d bytes", size, to)
			}
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err == nil {
			t.Fatal("a member changed the area's seals")
		}
		own, err := rts[0].coll.Own(key, n)
		if err != nil {
			t.Fatal(err)
		}
		own.Bytes()[len(own.Bytes())-1] = 9
		mem, err := segments.MapFD(fd, segments.CollAreaSize(n))
		if err != nil {
			t.Fatalf("map the sealed area: %v", err)
		}
		if mem[len(mem)-1] != 9 {
			t.Fatal("the member's mapping is not the owner's memory")
		}
		segments.UnmapShared(mem)
		for _, bad := range []struct {
			size  int64
			seals int
		}{{size, 0}, {size, unix.F_SEAL_GROW}, {size - int64(unix.Getpagesize()), areaSeals}, {size + int64(unix.Getpagesize()), areaSeals}} {
			fd, err := testMemfd(bad.size, bad.seals)
			if err != nil {
				t.Fatal(err)
			}
			if mem, err := segments.MapFD(fd, segments.CollAreaSize(n)); err == nil {
				segments.UnmapShared(mem)
				t.Fatalf("mapped a memfd of %d bytes with seals %#x", bad.size, bad.seals)
			}
			unix.Close(fd)
		}
	})
}
