package pgas

import "testing"

// Rule: timing a collective or a one-sided operation allocates nothing
// (the hot path only adds to series looked up once).
func TestOpTimerAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		collStart("allreduce").done()
		oneSidedStart("wait").done()
	}); n != 0 {
		t.Fatalf("%v allocations per timed operation, want 0", n)
	}
}
