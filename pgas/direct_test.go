package pgas

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

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

// stallMem is nearMem whose FetchMemory of a segment's memory (not of its
// notification area, asked for next) for proc stall says so on entered,
// then waits until release is closed: a peer too starved (or stopped) to
// answer.
type stallMem struct {
	nearMem
	stall            transport.Proc
	entered, release chan struct{}
}

func (s stallMem) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	if peer == s.stall && key < 1<<16 {
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
