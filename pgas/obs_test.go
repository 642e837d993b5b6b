package pgas

import (
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

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

// twoPaths is a transport with two paths (transport.Paths): proc 1 is
// near, the others far.
type twoPaths struct{ transport.Transport }

func (twoPaths) IsNear(p transport.Proc) bool  { return p == 1 }
func (twoPaths) PathNames() (near, far string) { return "shm", "tcp" }

// Rule: frames are counted under the transport they went through: a
// transport with two paths labels a near peer's frames with the near
// one's name, the others with the far one's; a plain transport with its
// own package's name.
func TestFrameLabels(t *testing.T) {
	f := framesOf(twoPaths{})
	if f.to(1) != framesNamed("shm") || f.to(2) != framesNamed("tcp") {
		t.Fatal("a near peer's frames are not counted under shm, or a far one's under tcp")
	}
	if g := framesOf(mem.NewNetwork(2, mem.Config{}).Endpoint(0)); g.to(1) != framesNamed("mem") {
		t.Fatal("a plain transport's frames are not counted under its package's name")
	}
}
