package pgas_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// writeLoop has rt write k into the 8 bytes at off of rank 0's segment 1
// and notify slot 3 with k, for k = 1, 2, ..., through the public API,
// until stop: a process that goes on as if nothing happened, whatever its
// calls return. It counts the calls.
func writeLoop(rt *pgas.Runtime, stop *atomic.Bool, posted *atomic.Int64) {
	writeLoopCtx(rt, stop, posted, nil)
}

// writeLoopCtx is writeLoop with each call's context from newCtx (nil:
// no deadline): a writer whose calls are cancelled part way.
func writeLoopCtx(rt *pgas.Runtime, stop *atomic.Bool, posted *atomic.Int64, newCtx func() (context.Context, context.CancelFunc)) {
	if newCtx == nil {
		newCtx = func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	}
	seg, _ := rt.Segment(1)
	for k := uint64(1); !stop.Load(); k++ {
		binary.LittleEndian.PutUint64(seg.Bytes()[0:], k)
		ctx, cancel := newCtx()
		rt.WriteNotify(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 64}, pgas.Loc{Seg: 1, Off: 0}, 8, 3, uint32(k))
		posted.Add(1)
		rt.Wait(ctx, 0)
		cancel()
	}
}

// notesAs maps owner's notification area of segment 1 as process proc
// asks for it, with the writer line it is given.
func notesAs(t *testing.T, owner *pgas.Runtime, proc transport.Proc) *segments.PeerNotes {
	t.Helper()
	fd, tag, err := pgas.ProvideMemory(owner, proc, 1|1<<16)
	if err != nil {
		t.Fatal(err)
	}
	notes, err := segments.MapNotes(fd, segments.DefaultNotifications, int(tag>>32))
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(notes.Unmap)
	return notes
}

// waitParked returns once a waiter of the owner of notes is parked: a
// store into slot probeSlot (which no test waits on) reports it.
func waitParked(t *testing.T, notes *segments.PeerNotes, e uint32) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if wake, _ := notes.Store(probeSlot, 1, e); wake {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiter parked")
		}
		time.Sleep(time.Millisecond)
	}
}

const probeSlot = 1000

// waitPosted returns once the writer posted n more operations.
func waitPosted(t *testing.T, posted *atomic.Int64, n int64) {
	t.Helper()
	start, deadline := posted.Load(), time.Now().Add(time.Minute)
	for posted.Load() < start+n {
		if time.Now().After(deadline) {
			t.Fatal("the writer posts nothing")
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// The fence holds while the bad writer runs: a survivor that has not
// applied the newer view (its membership is paused) keeps writing into
// rank 0's segment and setting its slot, concurrently with rank 0
// applying the view and recovering, round after round. From the moment
// rank 0 has applied the view, no slot it reads is set by the writer; once
// its Recover returned, the writer changes none of its data; and the
// writer's own Wait fails as a refused frame would. Then the writer
// applies the view, recovers, and writes again in the new epoch, in
// memory.
func TestDirectFenceHoldsAgainstConcurrentOlderEpochWriter(t *testing.T) {
	pgas.DirectMapped(t)
	rounds := 10000
	if raceOn || testing.Short() {
		rounds = 500
	}
	rts, _, _, fm, handles := newFTJobOn(t, 2, 0, nil, pgas.Direct)
	olderEpochWriterRounds(t, rts, fm, handles, rounds, func(writer *pgas.Runtime) string {
		if writer.Stats().DirectNotes == 0 {
			return "the writer wrote nothing in memory"
		}
		return ""
	})
	// In the new epoch the writer is admitted again, in memory.
	owner, writer := rts[0], rts[1]
	seg0, _ := owner.Segment(1)
	ctx := t.Context()
	n := writer.Stats().DirectNotes
	if err := writer.Notify(ctx, 0, 0, 1, 5, 7); err != nil {
		t.Fatal(err)
	}
	if err := writer.Wait(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := seg0.Notification(5); v != 7 || writer.Stats().DirectNotes != n+1 {
		t.Fatalf("slot 5 = %d after the recovery, notes in memory %d -> %d", v, n, writer.Stats().DirectNotes)
	}
}

// olderEpochWriterRounds runs the rounds of the fence against a writer of
// the older epoch (TestDirectFenceHoldsAgainstConcurrentOlderEpochWriter)
// on rts[0] (the owner) and rts[1] (the writer). untested, after the
// first round's writes, says why the round tested nothing ("" when it
// did).
func olderEpochWriterRounds(t *testing.T, rts []*pgas.Runtime, fm *pgastest.Membership, handles []*pgastest.Handle, rounds int, untested func(writer *pgas.Runtime) string) {
	olderEpochWriterRoundsCtx(t, rts, fm, handles, rounds, untested, nil)
}

// olderEpochWriterRoundsCtx is olderEpochWriterRounds with the writer's
// contexts from newCtx (writeLoopCtx).
func olderEpochWriterRoundsCtx(t *testing.T, rts []*pgas.Runtime, fm *pgastest.Membership, handles []*pgastest.Handle, rounds int, untested func(writer *pgas.Runtime) string, newCtx func() (context.Context, context.CancelFunc)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	create := func() {
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
			return err
		})
	}
	create()
	owner, writer := rts[0], rts[1]
	seg0, _ := owner.Segment(1)
	var stop atomic.Bool
	var posted atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait() // a failed round stops its writer before the cleanup closes the runtimes
	defer stop.Store(true)
	for r := 0; r < rounds; r++ {
		handles[1].Pause(true)
		stop.Store(false)
		wg.Add(1)
		go func() { defer wg.Done(); writeLoopCtx(writer, &stop, &posted, newCtx) }()
		waitPosted(t, &posted, 3)
		if r == 0 {
			if why := untested(writer); why != "" {
				t.Fatal(why + ": the test tests nothing")
			}
		}
		e := fm.Advance()
		for owner.Epoch() != e {
			time.Sleep(10 * time.Microsecond)
		}
		for i := 0; i < 20; i++ {
			if v, _ := seg0.Notification(3); v != 0 {
				t.Fatalf("round %d: slot 3 = %d after the view: set by a writer of the older epoch", r, v)
			}
		}
		if err := owner.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		held := binary.LittleEndian.Uint64(seg0.Bytes()[64:])
		waitPosted(t, &posted, 1) // the writer goes on meanwhile
		for i := 0; i < 20; i++ {
			if got := binary.LittleEndian.Uint64(seg0.Bytes()[64:]); got != held {
				t.Fatalf("round %d: the writer of the older epoch changed the data from %d to %d after Recover", r, held, got)
			}
			if v, _ := seg0.Notification(3); v != 0 {
				t.Fatalf("round %d: slot 3 = %d after Recover", r, v)
			}
		}
		stop.Store(true)
		wg.Wait()
		handles[1].Pause(false)
		for writer.Epoch() != e {
			time.Sleep(10 * time.Microsecond)
		}
		if err := writer.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		create()
	}
}

// A process declared failed keeps writing through the memory it was
// given (its membership never tells it), concurrently with the
// survivor's view and Recover: nothing it sets is read from the view on,
// nothing it copies lands after Recover, whichever way it writes (through
// its runtime, or straight into the mappings, as a process that ignores
// the protocol would).
func TestDirectFenceHoldsAgainstConcurrentFailedWriter(t *testing.T) {
	pgas.DirectMapped(t)
	rounds := 20
	if raceOn || testing.Short() {
		rounds = 5
	}
	for r := 0; r < rounds; r++ {
		failedWriterRound(t, r)
	}
}

func failedWriterRound(t *testing.T, r int) {
	rts, promoted, _, fm, handles := newFTJobOn(t, 2, 1, nil, pgas.Direct)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgas.Each(t, rts, func(rt *pgas.Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	owner, bad := rts[0], rts[1]
	seg0, _ := owner.Segment(1)
	// The raw mappings, as the bad process holds them.
	notes := notesAs(t, owner, 1)
	fd, _, err := pgas.ProvideMemory(owner, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	data, err := segments.MapFD(fd, 4096)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer segments.UnmapShared(data)

	handles[1].Pause(true) // it never learns that it was replaced
	var stop atomic.Bool
	var posted atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	wg.Add(2)
	go func() { defer wg.Done(); writeLoop(bad, &stop, &posted) }()
	go func() { // ignores Enter and the epoch: stores all the same
		defer wg.Done()
		e := uint32(owner.Epoch())
		for k := uint32(1); !stop.Load(); k++ {
			binary.LittleEndian.PutUint64(data[128:], uint64(k))
			notes.Store(4, k, e)
		}
	}()
	waitPosted(t, &posted, 3)
	if err := handles[0].ReportFailure(ctx, 1, bad.Epoch()); err != nil {
		t.Fatal(err)
	}
	e := fm.Current().Epoch
	for owner.Epoch() != e {
		time.Sleep(10 * time.Microsecond)
	}
	for i := 0; i < 50; i++ {
		for _, id := range []segments.NotificationID{3, 4} {
			if v, _ := seg0.Notification(id); v != 0 {
				t.Fatalf("round %d: slot %d = %d after the view declared its writer failed", r, id, v)
			}
		}
	}
	if err := owner.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	held64 := binary.LittleEndian.Uint64(seg0.Bytes()[64:])
	held128 := binary.LittleEndian.Uint64(seg0.Bytes()[128:])
	waitPosted(t, &posted, 1)
	deadline := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := binary.LittleEndian.Uint64(seg0.Bytes()[64:]); got != held64 {
			t.Fatalf("round %d: the failed process's runtime changed the data from %d to %d after Recover", r, held64, got)
		}
		if got := binary.LittleEndian.Uint64(seg0.Bytes()[128:]); got != held128 {
			t.Fatalf("round %d: the failed process's raw stores changed the data from %d to %d after Recover", r, held128, got)
		}
	}
	stop.Store(true)
	wg.Wait()
	// The survivors go on with the promoted spare.
	spare := <-promoted
	if spare.Rank() != 1 {
		t.Fatalf("the spare holds rank %d, want 1", spare.Rank())
	}
}

// A WriteNotify whose context has ended before the call still wakes the
// peer's parked waiter, promptly: the slot is set, so the wake-up goes on
// without the caller.
func TestDirectWakeOutlivesCallersContext(t *testing.T) {
	pgas.DirectMapped(t)
	rts, _, _, _, _ := newFTJobOn(t, 2, 0, nil, pgas.Direct, func(c *pgas.Config) { c.SpinWait = 0 })
	ctx := context.Background()
	pgas.Each(t, rts, func(rt *pgas.Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	probe := notesAs(t, rts[0], 1) // to see the waiter park (slot probeSlot)
	for round := 0; round < 20; round++ {
		got := make(chan error, 1)
		go func() {
			_, err := rts[0].NotifyWaitSome(ctx, 1, 7, 1)
			got <- err
		}()
		waitParked(t, probe, uint32(rts[1].Epoch()))
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		err := rts[1].WriteNotify(cancelled, 0, 0, pgas.Loc{Seg: 1, Off: 64}, pgas.Loc{Seg: 1, Off: 64}, 8, 7, uint32(round+1))
		if err != nil { // allowed; then the waiter is woken by a call that goes through
			if err := rts[1].Notify(ctx, 0, 0, 1, 7, 1); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case werr := <-got:
			if werr != nil {
				t.Fatal(werr)
			}
		case <-time.After(100 * time.Millisecond):
			t.Fatalf("round %d: WriteNotify with a cancelled context returned nil and the waiter still sleeps after 100 ms", round)
		}
		rts[1].Wait(ctx, 0)
		rts[0].NotifyReset(1, 7)
	}
}

// A writer that dies between its store and its wake-up leaves no waiter
// asleep: the waiter scans again when the writer's connection is lost.
// (The membership is held, so the view that follows does not come first:
// once applied, it would make the value, of the older epoch, read as not
// set, as a frame of the older epoch still on its way is refused.)
func TestDirectWaiterWakesWhenWriterDiesBeforeItsWake(t *testing.T) {
	_, nw, fm, got := storedWithoutWake(t)
	fm.Hold(1)
	defer fm.Release()
	nw.Kill(1) // before it sends the wake-up
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter still sleeps after its writer was lost")
	}
}

// The same store without its wake-up, but the view comes before anything
// tells the waiter that the writer is gone: the view drops the value (it
// belongs to an older epoch), and the waiter returns ErrStaleEpoch at
// that view instead of sleeping on for a notification nobody will set.
func TestDirectWaiterReturnsWhenAViewDropsItsUnwokenSlot(t *testing.T) {
	_, _, fm, got := storedWithoutWake(t)
	fm.Advance() // no wake-up was sent
	select {
	case err := <-got:
		if !errors.Is(err, pgas.ErrStaleEpoch) {
			t.Fatalf("NotifyWaitSome after the view dropped its slot: %v; want ErrStaleEpoch", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter still sleeps after a view dropped the slot stored for it")
	}
}

// storedWithoutWake sets up two ranks sharing memory, parks rank 0's
// waiter on slot 9 of segment 1, and stores into that slot as process 1,
// in its epoch, without the wake-up that should follow; got receives the
// waiter's result.
func storedWithoutWake(t *testing.T) ([]*pgas.Runtime, *mem.Network, *pgastest.Membership, chan error) {
	t.Helper()
	pgas.DirectMapped(t)
	rts, _, nw, fm, _ := newFTJobOn(t, 2, 1, nil, pgas.Direct, func(c *pgas.Config) { c.SpinWait = 0 })
	ctx := context.Background()
	pgas.Each(t, rts, func(rt *pgas.Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	notes := notesAs(t, rts[0], 1)
	got := make(chan error, 1)
	go func() {
		_, err := rts[0].NotifyWaitSome(ctx, 1, 9, 1)
		got <- err
	}()
	e := uint32(rts[1].Epoch())
	waitParked(t, notes, e)
	if wake, set := notes.Store(9, 5, e); !wake || !set {
		t.Fatalf("store: wake %v, set %v; want a parked waiter to wake", wake, set)
	}
	return rts, nw, fm, got
}
