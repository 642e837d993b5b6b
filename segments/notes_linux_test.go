package segments

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mapPeerNotes(t *testing.T, seg *Segment) *PeerNotes {
	t.Helper()
	fd, err := seg.DupNotes()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p, err := MapNotes(fd, seg.NumNotifications())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Unmap)
	return p
}

// A peer's mapping of the notification area sets slots the owner sees;
// after RenewNotes the slots keep their values, the peer's stores change
// nothing and its fences fail; after Close too.
func TestSharedNotesRenewFencesPeers(t *testing.T) {
	seg, err := New(1, 4096, Options{Backing: NewMemfdBacking(), ShareNotifications: true, Notifications: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	peer := mapPeerNotes(t, seg)
	if !peer.Fence() {
		t.Fatal("fence fails on a fresh area")
	}
	if wake, err := peer.Set(3, 42); err != nil || wake {
		t.Fatalf("Set = %v, %v; want no wake-up with no waiter", wake, err)
	}
	if v, _ := seg.Notification(3); v != 42 {
		t.Fatalf("owner reads %d, want 42", v)
	}
	if _, err := peer.Set(16, 1); err != ErrNotificationID {
		t.Fatalf("Set out of range = %v", err)
	}
	if err := seg.RenewNotes(); err != nil {
		t.Fatal(err)
	}
	if v, _ := seg.Notification(3); v != 42 {
		t.Fatalf("owner reads %d after the move, want 42 kept", v)
	}
	if peer.Fence() {
		t.Fatal("fence passes on a retired area")
	}
	peer.Set(4, 9)
	if v, _ := seg.Notification(4); v != 0 {
		t.Fatalf("a store through the old mapping set slot 4 = %d", v)
	}
	fresh := mapPeerNotes(t, seg)
	if !fresh.Fence() {
		t.Fatal("fence fails on the renewed area")
	}
	fresh.Set(5, 7)
	if v, _ := seg.ResetNotification(5); v != 7 {
		t.Fatalf("reset reads %d, want 7", v)
	}
	seg.Close()
	if fresh.Fence() {
		t.Fatal("fence passes after Close")
	}
	if _, err := seg.DupNotes(); err == nil {
		t.Fatal("DupNotes after Close succeeds")
	}
}

// A parked waiter is seen by a peer's Set, and Wake lets it find the slot.
func TestSharedNotesWakeParkedWaiter(t *testing.T) {
	seg, err := New(1, 4096, Options{Backing: NewMemfdBacking(), ShareNotifications: true})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	peer := mapPeerNotes(t, seg)
	got := make(chan NotificationID, 1)
	go func() {
		id, _ := seg.WaitSome(context.Background(), 10, 5, WaitPolicy{})
		got <- id
	}()
	for sleepersOf(seg.notes.mem).Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	wake, err := peer.Set(12, 1)
	if err != nil || !wake {
		t.Fatalf("Set = %v, %v; want a wake-up for the parked waiter", wake, err)
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

func TestMapNotesRefusesWrongSize(t *testing.T) {
	seg, err := New(1, 4096, Options{Backing: NewMemfdBacking(), ShareNotifications: true, Notifications: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	fd, _ := seg.DupNotes()
	defer unix.Close(fd)
	if _, err := MapNotes(fd, 5000); err == nil {
		t.Fatal("MapNotes accepted an area of another size")
	}
}
