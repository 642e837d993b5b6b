package tree

import (
	"slices"
	"testing"
	"time"
)

// Pick right after a failure lets no mark run out: with two silent
// processes first, each failing only after a dial time-out longer than a
// mark, the choice still reaches the third.
func TestPickAfterFailures(t *testing.T) {
	up := []uint32{0, 1, 2}
	bad := map[uint32]time.Time{}
	now := time.Unix(1000, 0)
	const dial, mark = 3 * time.Second, 2 * time.Second
	var tried []uint32
	failed := false
	for range 4 {
		p, _ := Pick(up, bad, now, !failed)
		tried = append(tried, p)
		if p == 2 {
			break
		}
		now = now.Add(dial)
		bad[p], failed = now.Add(mark), true
	}
	if !slices.Equal(tried, []uint32{0, 1, 2}) {
		t.Fatalf("tried %v, want [0 1 2]", tried)
	}
	// After a success the marks that ran out expire: the parent is tried
	// again.
	if p, _ := Pick(up, bad, now.Add(10*time.Second), true); p != 0 {
		t.Fatalf("after a success and the marks' end: %d, want 0", p)
	}
}

// When every process is marked, Pick falls back on the one whose mark
// ends first; with nobody to ask it returns None.
func TestPickFallback(t *testing.T) {
	now := time.Unix(1000, 0)
	bad := map[uint32]time.Time{4: now.Add(3 * time.Second), 5: now.Add(time.Second), 6: now.Add(2 * time.Second)}
	if p, fallback := Pick([]uint32{4, 5, 6}, bad, now, true); p != 5 || !fallback {
		t.Fatalf("Pick = %d, %v; want 5, true", p, fallback)
	}
	if p, fallback := Pick(nil, bad, now, true); p != None || fallback {
		t.Fatalf("Pick(nil) = %d, %v; want None, false", p, fallback)
	}
}

func TestHeard(t *testing.T) {
	var h Heard
	if p, ok := h.Leader(); ok || p != None || !h.Contact().IsZero() {
		t.Fatalf("zero Heard: leader %d %v, contact %v", p, ok, h.Contact())
	}
	got := time.Unix(1000, 0)
	h.Record(0, true, time.Second, got)
	if p, ok := h.Leader(); !ok || p != 0 || !h.Contact().Equal(got.Add(-time.Second)) {
		t.Fatalf("after an answer naming proc 0: leader %d %v, contact %v", p, ok, h.Contact())
	}
	// An answer that names no leader keeps the last one; an older contact
	// does not replace a fresher one; one that is not fresh tells none.
	h.Record(None, true, 5*time.Second, got)
	h.Record(7, false, 0, got.Add(time.Hour))
	if p, _ := h.Leader(); p != 7 || !h.Contact().Equal(got.Add(-time.Second)) {
		t.Fatalf("leader %d, contact %v; want 7, %v", p, h.Contact(), got.Add(-time.Second))
	}
}
