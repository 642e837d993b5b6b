package segments

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mapPeerNotes(t *testing.T, seg *Segment, writer int) *PeerNotes {
	t.Helper()
	fd, err := seg.DupNotes()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p, err := MapNotes(fd, seg.NumNotifications(), writer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Unmap)
	return p
}

func sharedSeg(t *testing.T, size int64, slots int) *Segment {
	t.Helper()
	seg, err := New(1, size, Options{Backing: NewMemfdBacking(), ShareNotifications: true, Notifications: slots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	return seg
}

// A peer's mapping of the notification area sets slots the owner sees in
// their epoch. Once the owner is in a newer epoch, what the peer set in
// the older one reads as not set, what it sets still is not seen, its
// fences fail and it is not admitted to copy; it cannot store over a
// value of the newer epoch. After Close every fence fails.
func TestSharedNotesEpochFencesPeers(t *testing.T) {
	seg := sharedSeg(t, 4096, 16)
	peer := mapPeerNotes(t, seg, 0)
	if !peer.Fence(0) {
		t.Fatal("fence fails on a fresh area")
	}
	if wake, set, err := peer.Set(3, 42, 0); err != nil || wake || !set {
		t.Fatalf("Set = %v, %v, %v; want set, no wake-up with no waiter", wake, set, err)
	}
	if v, _ := seg.Notification(3); v != 42 {
		t.Fatalf("owner reads %d, want 42", v)
	}
	if _, _, err := peer.Set(16, 1, 0); err != ErrNotificationID {
		t.Fatalf("Set out of range = %v", err)
	}
	seg.SetEpoch(1)
	if v, _ := seg.Notification(3); v != 0 {
		t.Fatalf("a value of epoch 0 reads %d in epoch 1", v)
	}
	if peer.Fence(0) {
		t.Fatal("a fence of epoch 0 passes once the owner is in epoch 1")
	}
	if peer.Enter(0) {
		t.Fatal("a copy of epoch 0 admitted once the owner is in epoch 1")
	}
	peer.Set(4, 9, 0)
	if v, _ := seg.Notification(4); v != 0 {
		t.Fatalf("a store of epoch 0 set slot 4 = %d in epoch 1", v)
	}
	if _, set, _ := peer.Set(5, 7, 1); !set || !peer.Fence(1) {
		t.Fatal("a writer of epoch 1 cannot set a slot")
	}
	if _, set, _ := peer.Set(5, 99, 0); set {
		t.Fatal("a writer of epoch 0 stored over a value of epoch 1")
	}
	if v, _ := seg.ResetNotification(5); v != 7 {
		t.Fatalf("reset reads %d, want 7", v)
	}
	if _, set, _ := peer.Set(5, 99, 0); set {
		t.Fatal("a writer of epoch 0 stored over a slot reset in epoch 1")
	}
	seg.SetEpoch(0) // never lowers
	if seg.Epoch() != 1 {
		t.Fatalf("epoch %d after SetEpoch(0), want 1 kept", seg.Epoch())
	}
	seg.Close()
	if peer.Fence(1) || peer.Enter(1) {
		t.Fatal("fence or copy admitted after Close")
	}
	if _, err := seg.DupNotes(); err == nil {
		t.Fatal("DupNotes after Close succeeds")
	}
}

// A parked waiter is seen by a peer's Set, and Wake lets it find the slot.
func TestSharedNotesWakeParkedWaiter(t *testing.T) {
	seg := sharedSeg(t, 4096, 0)
	peer := mapPeerNotes(t, seg, 0)
	got := make(chan NotificationID, 1)
	go func() {
		id, _ := seg.WaitSome(context.Background(), 10, 5, WaitPolicy{})
		got <- id
	}()
	for sleepersOf(seg.notes.mem).Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	wake, set, err := peer.Set(12, 1, 0)
	if err != nil || !wake || !set {
		t.Fatalf("Set = %v, %v, %v; want a wake-up for the parked waiter", wake, set, err)
	}
	seg.Wake()
	select {
	case id := <-got:
		if id != 12 {
			t.Fatalf("waiter returned %d, want 12", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the woken waiter did not return")
	}
	if n := sleepersOf(seg.notes.mem).Load(); n != 0 {
		t.Fatalf("%d sleepers after the waiter returned", n)
	}
}

func TestMapNotesRefusesWrongArea(t *testing.T) {
	seg := sharedSeg(t, 4096, 16)
	fd, _ := seg.DupNotes()
	defer unix.Close(fd)
	if _, err := MapNotes(fd, 5000, 0); err == nil {
		t.Fatal("MapNotes accepted an area of another size")
	}
	if _, err := MapNotes(fd, 16, MaxWriters); err == nil {
		t.Fatal("MapNotes accepted a writer line out of range")
	}
	// An area its owner did not seal could be truncated under it.
	raw, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(raw)
	unix.Ftruncate(raw, int64(noteAreaSize(16)))
	if _, err := MapNotes(raw, 16, 0); err == nil {
		t.Fatal("MapNotes accepted an unsealed memfd")
	}
}

// Neither a notification area nor a segment's memfd can be shrunk by a
// process it was given to (which would crash the owner with SIGBUS).
func TestSharedMemoryCannotShrink(t *testing.T) {
	seg := sharedSeg(t, 8192, 16)
	fd, _ := seg.DupNotes()
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 0); err == nil {
		t.Fatal("a peer truncated the notification area")
	}
	b := seg.backing.(*MemfdBacking)
	dfd, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if err := unix.Ftruncate(dfd, 4096); err == nil {
		t.Fatal("a peer truncated the segment's memfd")
	}
	if _, err := unix.FcntlInt(uintptr(dfd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err == nil {
		t.Fatal("a peer added a seal")
	}
	seg.Bytes()[8191] = 1 // still mapped whole
}

// The fence holds while the writer runs concurrently with the owner's
// change of epoch, round after round: once the owner has raised its epoch
// and seen no copy of the writer under way, nothing the writer stores
// reaches the owner's data, and nothing it stored in the older epoch
// reads as a notification. Then the writer moves to the owner's epoch and
// is admitted again.
func TestSharedNotesFenceConcurrentWithEpochChange(t *testing.T) {
	// The counted announcement (Enter, any goroutine), and a queue's
	// (EnterQueue: a plain store that the owner's SyncWriters orders),
	// with and without a slot stored (whose compare-and-swap is a full
	// barrier of its own, which could hide a missing one). What they
	// check is the order of the steps (announce, then load the epoch;
	// raise, then sync, then read the lines): a writer that loads first
	// fails here within a few hundred rounds. The store-load reordering by
	// the processor that SyncWriters exists for opens a window of a few
	// nanoseconds, which these rounds seldom hit.
	for _, c := range []struct {
		name   string
		queue  bool
		notify bool
	}{{"counted", false, true}, {"queue", true, true}, {"queue-data-only", true, false}} {
		t.Run(c.name, func(t *testing.T) { fenceConcurrentWithEpochChange(t, c.queue, c.notify) })
	}
}

func fenceConcurrentWithEpochChange(t *testing.T, queue, notify bool) {
	const rounds = 10000
	b := NewMemfdBacking()
	seg, err := New(1, 4096, Options{Backing: b, ShareNotifications: true, Notifications: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	const line, q = 7, 2
	peer := mapPeerNotes(t, seg, line)
	if queue && !peer.fast {
		t.Skip("this kernel has no membarrier(2) global expedited command: EnterQueue is Enter here")
	}
	enter, exit := peer.Enter, peer.Exit
	if queue {
		enter = func(e uint32) bool { return peer.EnterQueue(q, e) }
		exit = func() { peer.ExitQueue(q) }
	}
	dfd, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	data, err := MapFD(dfd, seg.Size())
	unix.Close(dfd)
	if err != nil {
		t.Fatal(err)
	}
	defer UnmapShared(data)

	var writerEpoch atomic.Uint32 // the epoch the writer believes it is in
	var stop atomic.Bool
	var stores atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait() // before the mappings go
	defer stop.Store(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := uint64(1); !stop.Load(); k++ {
			e := writerEpoch.Load()
			if !enter(e) {
				continue
			}
			binary.LittleEndian.PutUint64(data[64:], k)
			if notify {
				peer.Store(3, uint32(k), e)
			}
			exit()
			stores.Add(1)
		}
	}()
	own := seg.Bytes()
	for r := uint32(0); r < rounds; r++ {
		for stores.Load() == 0 || writerEpoch.Load() != r {
			// let the writer land a few stores in epoch r
			if writerEpoch.Load() != r {
				writerEpoch.Store(r)
			}
		}
		seg.SetEpoch(r + 1)
		if err := SyncWriters(); err != nil {
			t.Fatal(err)
		}
		for seg.WriterBusy(line) {
		}
		held := binary.LittleEndian.Uint64(own[64:])
		for i := 0; i < 50; i++ {
			if v, _ := seg.Notification(3); v != 0 {
				t.Fatalf("round %d: a notification of epoch %d reads %d in epoch %d", r, r, v, r+1)
			}
			if got := binary.LittleEndian.Uint64(own[64:]); got != held {
				t.Fatalf("round %d: the writer of epoch %d changed the data from %d to %d after the owner moved on", r, r, held, got)
			}
		}
		stores.Store(0)
	}
}
