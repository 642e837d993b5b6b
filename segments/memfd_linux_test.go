package segments

import (
	"bytes"
	"testing"
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
	sh, err := b.Shared(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := MapShared(sh, seg.Size())
	if err != nil {
		t.Skipf("cannot map a segment through pidfd_getfd here: %v", err)
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
	sh2, err := b.Shared(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if sh2.Ino == sh.Ino {
		t.Fatal("Renew kept the memfd")
	}
	if _, err := MapShared(sh, seg.Size()); err == nil {
		t.Fatal("the old descriptor still maps (it should be closed, or another file)")
	}
	peer2, err := MapShared(sh2, seg.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer UnmapShared(peer2)
	if !bytes.Equal(peer2[100:113], []byte("from the peer")) || peer2[0] != 7 {
		t.Fatal("a fresh mapping does not see the renewed segment")
	}
}
