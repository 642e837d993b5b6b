package pgas

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// nearMem is a mem transport whose every peer is on this host (nearer),
// as transport/route reports the peers it reaches through shared memory.
type nearMem struct{ *mem.Transport }

func (nearMem) IsNear(transport.Proc) bool { return true }

func direct(c *Config) {
	c.DirectShm = true
	c.Transport = nearMem{c.Transport.(*mem.Transport)}
}

// directMapped skips the test where memfds are not available.
func directMapped(t *testing.T) {
	b := segments.NewMemfdBacking()
	m, err := b.Alloc(4096)
	if err != nil {
		t.Skipf("no memfd: %v", err)
	}
	b.Free(m)
}

// With DirectShm, a write to a same-host rank is copied into its segment
// (the payload does not go through the transport) and its notification
// wakes the target's NotifyWaitSome; Wait returns once the target has it.
func TestDirectWriteNotify(t *testing.T) {
	directMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 1, direct)
		ctx := context.Background()
		const size = 1 << 20
		each(t, rts, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 2*size, nil)
			return err
		})
		src, _ := rts[0].Segment(1)
		for i := range size {
			src.Bytes()[i] = byte(i * 7)
		}
		each(t, rts, func(rt *Runtime) error {
			if rt.Rank() == 0 {
				if err := rt.WriteNotify(ctx, 0, 1, Loc{1, size}, Loc{1, 0}, size, 5, 9); err != nil {
					return err
				}
				if err := rt.Notify(ctx, 0, 1, 1, 6, 1); err != nil {
					return err
				}
				return rt.Wait(ctx, 0)
			}
			id, err := rt.NotifyWaitSome(ctx, 1, 5, 1)
			if err != nil {
				return err
			}
			if v, _ := rt.NotifyReset(1, id); id != 5 || v != 9 {
				t.Errorf("notification %d=%d, want 5=9", id, v)
			}
			dst, _ := rt.Segment(1)
			if !bytes.Equal(dst.Bytes()[size:], src.Bytes()[:size]) {
				t.Error("the data is not in place when the notification is seen")
			}
			_, err = rt.NotifyWaitSome(ctx, 1, 6, 1)
			return err
		})
		if n := rts[0].Stats().DirectWrites; n != 1 {
			t.Fatalf("%d direct writes, want 1", n)
		}
		// Out of range: refused by the sender's check as before.
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 2 * size}, Loc{1, 0}, 1); err == nil {
			t.Fatal("a write past the end was accepted")
		}
		// The target replaces the segment by one of its own: rank 0 sees
		// that the memory it maps was retired and sends the data.
		if err := rts[1].SegmentDelete(1); err != nil {
			t.Fatal(err)
		}
		solo, err := rts[1].NewGroup(300, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rts[1].SegmentCreate(ctx, 1, 2*size, solo); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil || rts[0].Stats().DirectWrites != 1 {
			t.Fatalf("a write after the target replaced its segment: Wait %v after %d direct writes, want nil after 1", err, rts[0].Stats().DirectWrites)
		}
		dst, _ := rts[1].Segment(1)
		if !bytes.Equal(dst.Bytes()[:8], src.Bytes()[:8]) {
			t.Fatal("the write did not land in the new segment")
		}
	})
}

// Fencing: a process that maps a survivor's segment from before a
// recovery (as a replaced process, stopped and resumed, does) changes
// nothing there afterwards, while the survivors, having recreated the
// segment, write to each other directly in the new epoch.
func TestDirectRecoverFencesOldMappings(t *testing.T) {
	directMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJobOn(t, 3, 1, nil, direct)
		ctx := context.Background()
		each(t, rts, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		// What process 1 holds of process 2's segment, as it would ask
		// for it: process 2 records process 1 as holding its memory.
		fd, _, err := rts[2].provideMemory(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		stale, err := segments.MapFD(fd, 4096)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		defer segments.UnmapShared(stale)
		seg1, _ := rts[1].Segment(1)
		copy(seg1.Bytes(), "kept!!!!")
		if err := rts[1].Write(ctx, 0, 2, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if rts[1].Stats().DirectWrites != 1 {
			t.Fatal("the write before the failure was not direct")
		}
		nw.Kill(1)
		survivors := []*Runtime{rts[0], rts[2]}
		each(t, survivors, func(rt *Runtime) error {
			rt.Barrier(ctx, nil)
			return rt.Recover(ctx)
		})
		spare := <-promoted
		job := []*Runtime{rts[0], spare, rts[2]}
		each(t, job, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		copy(stale[64:], "stale write")
		seg2, _ := rts[2].Segment(1)
		if bytes.Contains(seg2.Bytes(), []byte("stale write")) {
			t.Fatal("a mapping from before the recovery changed a survivor's segment")
		}
		seg0, _ := rts[0].Segment(1)
		copy(seg0.Bytes()[128:], "new epoch")
		before := rts[0].Stats().DirectWrites
		if err := rts[0].WriteNotify(ctx, 0, 2, Loc{1, 128}, Loc{1, 128}, 9, 1, 1); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if string(seg2.Bytes()[128:137]) != "new epoch" {
			t.Fatalf("survivor's write in the new epoch: %q", seg2.Bytes()[128:137])
		}
		if rts[0].Stats().DirectWrites != before+1 {
			t.Fatal("the write in the new epoch was not direct")
		}
		if string(seg2.Bytes()[:8]) != "kept!!!!" {
			t.Fatalf("the segment holds %q after the move, want what was written before", seg2.Bytes()[:8])
		}
	})
}

// A doorbell is checked against the segment it names: its range, and the
// generation of the memory the data was copied into (a copy that raced a
// SegmentDelete or a move is refused, not taken as done).
func TestCheckDoorbell(t *testing.T) {
	seg, err := segments.New(3, 4096, segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	si := &segInfo{seg: seg}
	si.gen.Store(7)
	for _, c := range []struct {
		off      uint64
		n        int
		gen      uint32
		want     error
		wid, wvl uint64
	}{
		{off: 8, n: 16, gen: 7, wid: 5, wvl: 9},
		{off: 4090, n: 16, gen: 7, want: ErrBounds},
		{off: 8, n: 16, gen: 6, want: ErrNoSegment},
	} {
		h := transport.Header{Type: transport.FrameWrite, Flags: transport.FlagNotify, Seg: 3, Off: c.off, A: 5, B: 9}
		doorbell(&h, c.n, c.gen)
		err := checkDoorbell(si, &h)
		if c.want != nil {
			if !errors.Is(err, c.want) {
				t.Errorf("%+v: %v, want %v", c, err, c.want)
			}
			continue
		}
		if err != nil || h.A != c.wid || h.B != c.wvl || h.Flags&transport.FlagDirect == 0 {
			t.Errorf("%+v: %v, header A=%d B=%d flags %b", c, err, h.A, h.B, h.Flags)
		}
	}
}

// Recover moves a shared segment only when a process it gave its memory
// to failed: a process that never asked for it cannot write it, so a move
// would cost the recovery a copy for nothing. Process 1 writes directly to
// process 0 (so holds its memory) in the first case only.
func TestDirectMoveOnlyForHolders(t *testing.T) {
	directMapped(t)
	for _, c := range []struct {
		name   string
		victim transport.Proc
		wrote  bool
	}{{"a holder", 1, true}, {"not a holder", 1, false}, {"another host", 2, false}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rts, promoted, nw, _, _ := newFTJobOn(t, 3, 1, []string{"a", "a", "b", "a"}, direct)
				ctx := context.Background()
				each(t, rts, func(rt *Runtime) error {
					_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
					return err
				})
				seg0, _ := rts[0].Segment(1)
				copy(seg0.Bytes(), "before")
				ino := func() uint64 {
					rts[0].segMu.RLock()
					defer rts[0].segMu.RUnlock()
					fd, err := rts[0].segs[1].backing.Dup(rts[0].segs[1].seg.Bytes())
					if err != nil {
						t.Fatal(err)
					}
					defer unix.Close(fd)
					var st unix.Stat_t
					if err := unix.Fstat(fd, &st); err != nil {
						t.Fatal(err)
					}
					return st.Ino
				}
				before := ino()
				if c.wrote {
					if err := rts[c.victim].Write(ctx, 0, 0, Loc{1, 512}, Loc{1, 512}, 8); err != nil {
						t.Fatal(err)
					}
					if err := rts[c.victim].Wait(ctx, 0); err != nil || rts[c.victim].Stats().DirectWrites != 1 {
						t.Fatalf("the victim's write: %v after %d direct writes, want 1", err, rts[c.victim].Stats().DirectWrites)
					}
				}
				nw.Kill(c.victim)
				var survivors []*Runtime
				for p, rt := range rts {
					if transport.Proc(p) != c.victim {
						survivors = append(survivors, rt)
					}
				}
				each(t, survivors, func(rt *Runtime) error {
					rt.Barrier(ctx, nil)
					return rt.Recover(ctx)
				})
				spare := <-promoted
				job := append(survivors, spare)
				each(t, job, func(rt *Runtime) error {
					_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
					return err
				})
				if moved := ino() != before; moved != c.wrote {
					t.Fatalf("process %d failed: process 0's segment moved=%v, want %v", c.victim, moved, c.wrote)
				}
				if string(seg0.Bytes()[:6]) != "before" {
					t.Fatalf("process 0's segment holds %q after the recovery", seg0.Bytes()[:6])
				}
				// Writes between the survivors are direct again in the new
				// epoch, whether the memory moved or not.
				other := survivors[1]
				n := other.Stats().DirectWrites
				if err := other.WriteNotify(ctx, 0, 0, Loc{1, 64}, Loc{1, 64}, 8, 1, 1); err != nil {
					t.Fatal(err)
				}
				if err := other.Wait(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if other.Stats().DirectWrites != n+1 {
					t.Fatal("the write in the new epoch was not direct")
				}
			})
		})
	}
}

// stallMem is nearMem whose FetchMemory for proc stall says so on
// entered, then waits until release is closed: a peer too starved (or
// stopped) to answer.
type stallMem struct {
	nearMem
	stall            transport.Proc
	entered, release chan struct{}
}

func (s stallMem) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	if peer == s.stall {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return -1, 0, ctx.Err()
		}
	}
	return s.nearMem.FetchMemory(ctx, peer, key)
}

// A peer that is slow to hand its memory over holds up the writes to it
// only: writes to the other peers of the segment go on directly
// meanwhile, and the held write lands directly once the memory comes. (In
// real time, not in a bubble: a write stuck behind the fetch would wait on
// a mutex, which a bubble does not count as blocked, and hang.)
func TestDirectMapWaitsForOnePeerOnly(t *testing.T) {
	directMapped(t)
	entered, release := make(chan struct{}), make(chan struct{})
	rts, _ := newJob(t, 3, 1, func(c *Config) {
		c.DirectShm = true
		c.Transport = stallMem{nearMem{c.Transport.(*mem.Transport)}, 2, entered, release}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	each(t, rts, func(rt *Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	// writeTo writes 8 bytes to rank r on queue q and waits for them.
	writeTo := func(q Queue, r int) <-chan error {
		done := make(chan error, 1)
		go func() {
			err := rts[0].Write(ctx, q, r, Loc{1, 0}, Loc{1, 0}, 8)
			if err == nil {
				err = rts[0].Wait(ctx, q)
			}
			done <- err
		}()
		return done
	}
	held := writeTo(0, 2)
	<-entered // the write to 2 waits for 2's memory
	other := writeTo(1, 1)
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("a write to process 1 waited for process 2's memory")
	}
	if n := rts[0].Stats().DirectWrites; n != 1 {
		t.Fatalf("%d direct writes while process 2's memory was awaited, want 1 (the write to process 1)", n)
	}
	select {
	case err := <-held:
		t.Fatalf("the write to process 2 ended (%v) before its memory came", err)
	default:
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if n := rts[0].Stats().DirectWrites; n != 2 {
		t.Fatalf("%d direct writes, want 2: the held write did not go direct", n)
	}
}
