package launch

import (
	"testing"
	"time"
)

// A held role report comes back with its holder's exit, in order, or
// through due once the wait ended.
func TestHeldRoles(t *testing.T) {
	settled := make(chan struct{})
	defer close(settled)
	h := newHeldRoles(50*time.Millisecond, settled)
	defer h.stop()
	h.hold(1, role(4, 1, 2))
	h.hold(1, role(5, 1, 3))
	h.hold(2, role(6, 2, 3))
	if !h.has(1) || !h.has(2) || h.has(3) {
		t.Fatal("has: want 1 and 2 held, 3 not")
	}
	if rs := h.release(1); len(rs) != 2 || rs[0].Proc != 4 || rs[1].Proc != 5 {
		t.Fatalf("release(1) = %+v, want the reports of 4 then 5", rs)
	}
	if h.has(1) {
		t.Fatal("1 still held after its release")
	}
	select {
	case old := <-h.due:
		if old != 1 && old != 2 {
			t.Fatalf("due %d", old)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no holder came due within 30s of a 50ms wait")
	}
	if rs := h.releaseAll(); len(rs) != 1 || rs[0].Proc != 6 {
		t.Fatalf("releaseAll = %+v, want the report of 6", rs)
	}
}
