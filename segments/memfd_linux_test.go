package segments

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// A second mapping of a memfd segment (as a peer process has it) sees the
// segment's stores and its own land in the segment, until Renew: from then
// on the old mapping changes nothing the segment holds, and the segment
// keeps its contents at the same address.
func TestMemfdRenewFencesOldMappings(t *testing.T) {
	b := NewMemfdBacking()
	seg, err := New(1, 8192, Options{Backing: b})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	fd, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := MapFD(fd, seg.Size())
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer UnmapShared(peer)
	if Retired(peer) {
		t.Fatal("fresh memory reads as retired")
	}
	copy(peer[100:], "from the peer")
	if got := seg.Bytes()[100:113]; string(got) != "from the peer" {
		t.Fatalf("segment holds %q after the peer's store", got)
	}
	before := &seg.Bytes()[0]
	if err := b.Renew(seg.Bytes()); err != nil {
		t.Fatal(err)
	}
	if &seg.Bytes()[0] != before {
		t.Fatal("Renew moved the segment's address")
	}
	if got := seg.Bytes()[100:113]; string(got) != "from the peer" {
		t.Fatalf("segment holds %q after Renew, want the contents kept", got)
	}
	if !Retired(peer) {
		t.Fatal("the old mapping does not read as retired after Renew")
	}
	copy(peer[100:], "stale!!!!!!!!")
	if got := seg.Bytes()[100:113]; string(got) != "from the peer" {
		t.Fatalf("a store through the old mapping changed the renewed segment: %q", got)
	}
	seg.Bytes()[0] = 7
	if peer[0] == 7 {
		t.Fatal("the old mapping sees the renewed segment")
	}
	fd2, err := b.Dup(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	peer2, err := MapFD(fd2, seg.Size())
	unix.Close(fd2)
	if err != nil {
		t.Fatal(err)
	}
	defer UnmapShared(peer2)
	if !bytes.Equal(peer2[100:113], []byte("from the peer")) || peer2[0] != 7 {
		t.Fatal("a fresh mapping does not see the renewed segment")
	}
}

// Renew copies what the segment's memfd holds and nothing more: a large
// segment with a few bytes written (at the start, in the middle and at
// its odd-sized end) keeps them, reads zeros elsewhere, and its fresh
// memfd holds only the pages those bytes are in. (Copying the whole
// segment cost seconds for a 640 MiB shuffle segment, in one
// non-preemptible copy that stalled the process.)
func TestMemfdRenewCopiesHeldPagesOnly(t *testing.T) {
	b := NewMemfdBacking()
	const size = 1<<30 + 12345
	seg, err := New(1, size, Options{Backing: b})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	mem := seg.Bytes()
	at := []int{0, 1<<29 + 7, size - 1}
	for i, o := range at {
		mem[o] = byte(i + 1)
	}
	if err := b.Renew(mem); err != nil {
		t.Fatal(err)
	}
	for i, o := range at {
		if mem[o] != byte(i+1) {
			t.Fatalf("byte %d is %d after Renew, want %d", o, mem[o], i+1)
		}
	}
	for _, o := range []int{1, 4096, 1 << 29, 1<<29 + 8, size - 2} {
		if mem[o] != 0 {
			t.Fatalf("byte %d is %d after Renew, want 0", o, mem[o])
		}
	}
	fd, err := b.Dup(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	// The reads above map holes without allocating them; the three
	// written pages (and a huge page each, at most) are held.
	if held := st.Blocks * 512; held > 3*2<<20 {
		t.Fatalf("the renewed memfd holds %d bytes for 3 written bytes", held)
	}
}
