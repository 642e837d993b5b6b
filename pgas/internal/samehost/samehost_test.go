package samehost

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/segments"
)

// peerMem maps a segment of size bytes with slots notifications as a
// same-host peer would (Fetch, without the socket), and returns the
// owner's segment with it.
func peerMem(t *testing.T, size int64, slots int) (*segments.Segment, Mem) {
	t.Helper()
	b := segments.NewMemfdBacking()
	seg, err := segments.New(1, size, segments.Options{Backing: b, ShareNotifications: true, Notifications: slots})
	if err != nil {
		t.Skipf("no shared segments here: %v", err)
	}
	t.Cleanup(func() { seg.Close() })
	fd, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mem, err := segments.MapFD(fd, size)
	if err != nil {
		t.Fatal(err)
	}
	nfd, err := seg.DupNotes()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nfd)
	notes, err := segments.MapNotes(nfd, slots, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := Mem{Mem: mem, Notes: notes}
	t.Cleanup(m.Unmap)
	return seg, m
}

// The one decision (docs/design.md §9.3): memory only when the target is
// mapped, the operation in range, the peer quiet and up, and the queue
// and runtime free; anything else goes by frame.
func TestInMemory(t *testing.T) {
	_, m := peerMem(t, 4096, 8)
	ok := State{Quiet: true}
	data := make([]byte, 16)
	for _, tc := range []struct {
		name string
		m    Mem
		op   Op
		s    State
		want bool
	}{
		{"write", m, Op{Off: 0, Data: data}, ok, true},
		{"write at the end", m, Op{Off: 4096 - 16, Data: data}, ok, true},
		{"write+notify", m, Op{Off: 8, Data: data, Notify: true, ID: 7, Val: 1}, ok, true},
		{"notify", m, Op{Notify: true, ID: 0, Val: 1}, ok, true},
		{"not mapped", Mem{}, Op{Data: data}, ok, false},
		{"no notification area", Mem{Mem: m.Mem}, Op{Data: data}, ok, false},
		{"past the end", m, Op{Off: 4096 - 15, Data: data}, ok, false},
		{"offset past the end", m, Op{Off: 4097}, ok, false},
		{"negative offset", m, Op{Off: -1, Data: data}, ok, false},
		{"slot out of range", m, Op{Notify: true, ID: 8, Val: 1}, ok, false},
		{"negative slot", m, Op{Notify: true, ID: -1, Val: 1}, ok, false},
		{"peer not quiet", m, Op{Data: data}, State{}, false},
		{"peer down", m, Op{Data: data}, State{Quiet: true, Down: true}, false},
		{"queue full", m, Op{Data: data}, State{Quiet: true, Full: true}, false},
		{"runtime held", m, Op{Data: data}, State{Quiet: true, Held: true}, false},
	} {
		if got := InMemory(tc.m, tc.op, tc.s); got != tc.want {
			t.Errorf("%s: InMemory = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Put copies, then sets the slot in its epoch; a peer in a newer epoch
// admits nothing (docs/design.md §3), through a queue's word or the
// count alike.
func TestPutFencedByEpoch(t *testing.T) {
	seg, m := peerMem(t, 4096, 4)
	seg.SetEpoch(3)
	for _, q := range []int{-1, 0} {
		src := []byte("same host")
		done, wake, set := Put(m, Op{Off: 100, Data: src, Notify: true, ID: 2, Val: 9}, State{Quiet: true}, q, 3)
		if !done || wake || !set {
			t.Fatalf("queue %d: Put = %v, %v, %v; want done and set", q, done, wake, set)
		}
		if !bytes.Equal(seg.Bytes()[100:100+len(src)], src) {
			t.Fatalf("queue %d: the data is not in the owner's memory", q)
		}
		if v, _ := seg.Notification(2); v != 9 {
			t.Fatalf("queue %d: slot 2 = %d, want 9", q, v)
		}
		if done, _, _ := Put(m, Op{Off: 0, Data: []byte{1}}, State{Quiet: true}, q, 2); done {
			t.Fatalf("queue %d: a copy of epoch 2 was admitted by an owner in epoch 3", q)
		}
		if seg.Bytes()[0] != 0 {
			t.Fatalf("queue %d: a refused copy landed", q)
		}
		if seg.WriterBusy(0) {
			t.Fatalf("queue %d: the writer's line is left busy", q)
		}
		seg.ResetNotification(2)
	}
}

// Copy moves every byte, across its 64 KiB pieces.
func TestCopy(t *testing.T) {
	for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 3*chunk + 17} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + 1)
		}
		dst := make([]byte, n+1)
		Copy(dst, src)
		if !bytes.Equal(dst[:n], src) || dst[n] != 0 {
			t.Errorf("%d bytes: copied wrong", n)
		}
	}
}

// A segment's view of its peers maps each peer once, the first time,
// and only near ones that shared their memory; a retired view is gone.
func TestSegMapsOnce(t *testing.T) {
	// procs 0..3 hold ranks 0..3; rank 1 shared 4096 bytes, rank 2 did not.
	rankOf := []int{0, 1, 2, 3}
	descs := append(Desc(4096, true, 8, 5), Desc(4096, false, 0, 6)...)
	d := NewSeg(7, rankOf, []int{1, 2}, descs)
	if d.Epoch() != 7 || DescSize(descs, 1) != 4096 {
		t.Fatalf("epoch %d, size %d", d.Epoch(), DescSize(descs, 1))
	}
	fetched := 0
	fetch := func(ps Share) Mem {
		fetched++
		if ps != (Share{Size: 4096, Notes: 8, Gen: 5}) {
			t.Errorf("share %+v", ps)
		}
		return Mem{} // as a failed mapping
	}
	for range 2 {
		if _, ok := d.Get(1, func() { d.Map(1, true, fetch) }); ok {
			t.Fatal("a failed mapping is used")
		}
	}
	if fetched != 1 {
		t.Fatalf("proc 1 fetched %d times, want once", fetched)
	}
	d.Map(2, true, fetch) // shared nothing
	d.Map(3, true, fetch) // sent no descriptor
	if fetched != 1 {
		t.Fatal("fetched the memory of a peer that did not share it")
	}
	far := NewSeg(7, rankOf, []int{1, 2}, descs)
	far.Map(1, false, fetch)
	if fetched != 1 {
		t.Fatal("fetched the memory of a peer on another host")
	}
	tg := Target{Seg: d}
	if !tg.Live() {
		t.Fatal("a target of a live view is not live")
	}
	d.Retire()
	d.Unmap()
	if tg.Live() || (&Target{}).Live() {
		t.Fatal("a retired or empty target is live")
	}
}

// Keys name the group's tag, members and epoch; the rule takes 2 to
// MaxMembers members on one host with shared segments.
func TestAreaKeysAndRule(t *testing.T) {
	k := AreaKey(7, 3, 9)
	if n, e, ok := KeyArea(k); n != 3 || e != 9 || !ok {
		t.Errorf("KeyArea(AreaKey(7, 3, 9)) = %d, %d, %v", n, e, ok)
	}
	for _, bad := range []uint64{AreaKey(7, 1, 9), AreaKey(7, MaxMembers+1, 9), 7 | NotesKey} {
		if _, _, ok := KeyArea(bad); ok {
			t.Errorf("KeyArea(%#x) is an area", bad)
		}
	}
	for _, tc := range []struct {
		n             int
		direct, local bool
		want          bool
	}{{2, true, true, true}, {MaxMembers, true, true, true}, {1, true, true, false}, {MaxMembers + 1, true, true, false}, {4, false, true, false}, {4, true, false, false}} {
		if got := AreaFits(tc.n, tc.direct, tc.local); got != tc.want {
			t.Errorf("AreaFits(%d, %v, %v) = %v", tc.n, tc.direct, tc.local, got)
		}
	}
}

// A mark is held until a view retires its epoch, wakes the waiters, and
// a mark of an epoch older than the view's is dropped.
func TestAreasMarks(t *testing.T) {
	var as Areas
	k := AreaKey(7, 3, 5)
	wake := as.WakeChan()
	as.Mark(k, 5)
	if !as.NoArea(k) {
		t.Fatal("the mark is not held")
	}
	select {
	case <-wake:
	default:
		t.Fatal("a mark woke nobody")
	}
	as.Retire(6)
	if as.NoArea(k) {
		t.Fatal("a mark outlived its epoch")
	}
	as.Mark(k, 6)
	if as.NoArea(k) {
		t.Fatal("a mark of an older epoch was held")
	}
}
