package pgas_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// A write+notify to a same-host rank is done in its memory: the data and
// the notification land without a frame (no doorbell), Wait completes,
// and a waiter parked before the notification is woken.
func TestDirectNotifyInMemory(t *testing.T) {
	pgas.DirectMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, _, _ := newFTJobOn(t, 2, 0, nil, pgas.Direct)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		seg0, _ := rts[0].Segment(1)
		seg1, _ := rts[1].Segment(1)
		got := make(chan error, 1)
		go func() {
			id, err := rts[0].NotifyWaitSome(ctx, 1, 7, 2)
			if err == nil && id != 8 {
				err = errors.New("woke for another slot")
			}
			got <- err
		}()
		synctest.Wait() // parked
		copy(seg1.Bytes()[64:], "in place")
		if err := rts[1].WriteNotify(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 64}, pgas.Loc{Seg: 1, Off: 64}, 8, 8, 5); err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if v, _ := rts[0].NotifyReset(1, 8); v != 5 {
			t.Fatalf("slot 8 = %d, want 5", v)
		}
		if string(seg0.Bytes()[64:72]) != "in place" {
			t.Fatalf("data %q", seg0.Bytes()[64:72])
		}
		st := rts[1].Stats()
		if st.DirectWrites != 1 || st.DirectNotes != 1 || st.Wakes != 1 {
			t.Fatalf("stats %+v: want one write and one notification in memory, one wake-up", st)
		}
		// A Notify alone, with nobody waiting: no frame at all.
		if err := rts[1].Notify(ctx, 0, 0, 1, 9, 3); err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if v, _ := rts[0].NotifyReset(1, 9); v != 3 {
			t.Fatalf("slot 9 = %d, want 3", v)
		}
		if st := rts[1].Stats(); st.DirectNotes != 2 || st.Wakes != 1 {
			t.Fatalf("stats %+v after a notify with no waiter", st)
		}
	})
}

// A process declared failed sets nothing the survivors read from the
// moment they apply the view, before any Recover: its slots of the older
// epoch read as not set, what it stores is not seen, its fences fail and
// it is not admitted to copy. The survivors notify each other in memory
// again after the recovery.
func TestDirectNotesFencedAtView(t *testing.T) {
	pgas.DirectMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJobOn(t, 3, 1, nil, pgas.Direct)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		if err := rts[1].Notify(ctx, 0, 0, 1, 3, 11); err != nil {
			t.Fatal(err)
		}
		if err := rts[1].Wait(ctx, 0); err != nil || rts[1].Stats().DirectNotes != 1 {
			t.Fatalf("the notification before the failure: %v, %+v", err, rts[1].Stats())
		}
		seg0, _ := rts[0].Segment(1)
		if v, _ := seg0.Notification(3); v != 11 {
			t.Fatalf("slot 3 = %d before the failure, want 11", v)
		}
		// What process 1 holds of process 0's slots, as it asks for them.
		fd, tag, err := pgas.ProvideMemory(rts[0], 1, 1|1<<16)
		if err != nil {
			t.Fatal(err)
		}
		stale, err := segments.MapNotes(fd, segments.DefaultNotifications, int(tag>>32))
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		defer stale.Unmap()
		epoch := rts[0].Epoch()
		nw.Kill(1)
		for rts[0].Epoch() == epoch {
			time.Sleep(time.Millisecond)
		}
		if stale.Fence(uint32(epoch)) {
			t.Fatal("a fence through the failed process's mapping passes once the view is applied")
		}
		if stale.Enter(uint32(epoch)) {
			t.Fatal("the failed process is admitted to copy once the view is applied")
		}
		stale.Set(4, 99, uint32(epoch))
		if v, _ := seg0.Notification(4); v != 0 {
			t.Fatalf("the failed process set slot 4 = %d after the view", v)
		}
		if v, _ := seg0.Notification(3); v != 0 {
			t.Fatalf("slot 3 = %d in the new epoch; a notification of the older one must not count", v)
		}
		survivors := []*pgas.Runtime{rts[0], rts[2]}
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			rt.Barrier(ctx, nil)
			return rt.Recover(ctx)
		})
		spare := <-promoted
		pgas.Each(t, []*pgas.Runtime{rts[0], spare, rts[2]}, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
		n := rts[2].Stats().DirectNotes
		seg2, _ := rts[2].Segment(1)
		copy(seg2.Bytes()[8:], "new")
		if err := rts[2].WriteNotify(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 8}, pgas.Loc{Seg: 1, Off: 8}, 3, 5, 1); err != nil {
			t.Fatal(err)
		}
		if err := rts[2].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if rts[2].Stats().DirectNotes != n+1 {
			t.Fatal("the notification in the new epoch was not done in memory")
		}
		if v, _ := seg0.Notification(5); v != 1 || !bytes.Equal(seg0.Bytes()[8:11], []byte("new")) {
			t.Fatalf("slot 5 = %d, data %q", v, seg0.Bytes()[8:11])
		}
	})
}

// Operations that follow one done in memory, on the same queue, rank and
// segment, take the short way (postMem); after the segments are exchanged
// again (as after a recovery) or deleted, the queue forgets its target and
// the next operations find the new memory, or fail as they should.
func TestDirectShortWayFollowsTheMemory(t *testing.T) {
	pgas.DirectMapped(t)
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, _, _ := newFTJobOn(t, 2, 0, nil, pgas.Direct)
		ctx := context.Background()
		create := func() {
			pgas.Each(t, rts, func(rt *pgas.Runtime) error {
				_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
				return err
			})
		}
		create()
		src, _ := rts[0].Segment(1)
		writes := func(from int) {
			for i := range 100 {
				src.Bytes()[8*i] = byte(from + i)
				if err := rts[0].Write(ctx, 0, 1, pgas.Loc{Seg: 1, Off: int64(8 * i)}, pgas.Loc{Seg: 1, Off: int64(8 * i)}, 8); err != nil {
					t.Fatal(err)
				}
			}
			if err := rts[0].Notify(ctx, 0, 1, 1, 0, 1); err != nil {
				t.Fatal(err)
			}
			if err := rts[0].Wait(ctx, 0); err != nil {
				t.Fatal(err)
			}
			dst, _ := rts[1].Segment(1)
			for i := range 100 {
				if dst.Bytes()[8*i] != byte(from+i) {
					t.Fatalf("byte %d = %d, want %d", 8*i, dst.Bytes()[8*i], byte(from+i))
				}
			}
			if v, _ := rts[1].NotifyReset(1, 0); v != 1 {
				t.Fatalf("notification %d", v)
			}
		}
		writes(0)
		if st := rts[0].Stats(); st.DirectWrites != 100 || st.DirectNotes != 1 {
			t.Fatalf("stats %+v, want 100 writes and 1 notification in memory", st)
		}
		create() // exchanged again: the mappings are dropped and made anew
		writes(7)
		if st := rts[0].Stats(); st.DirectWrites != 200 {
			t.Fatalf("stats %+v after the exchange, want 200 writes in memory", st)
		}
		if err := rts[1].SegmentDelete(1); err != nil {
			t.Fatal(err)
		}
		err := rts[0].Write(ctx, 0, 1, pgas.Loc{Seg: 1}, pgas.Loc{Seg: 1}, 8)
		if err == nil {
			err = rts[0].Wait(ctx, 0)
		}
		if !errors.Is(err, pgas.ErrNoSegment) && !errors.Is(err, pgas.ErrStaleEpoch) {
			t.Fatalf("a write to a deleted segment: %v", err)
		}
	})
}
