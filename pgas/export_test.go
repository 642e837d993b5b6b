package pgas

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// What the external tests (package pgas_test, which may import pgastest
// and its membership) reach of the package: a few internals, and the
// helpers they share with the internal tests. Compiled into tests only.

// Helpers shared with the internal tests.
var (
	Each         = each
	CreateSeg    = createSeg
	Direct       = direct
	DirectMapped = directMapped
	Inputs       = inputs
	BitsEqual    = bitsEqual
)

// Timing and wire constants.
const (
	CloseWait     = closeWait
	FinishTimeout = finishTimeout
	CtlGoodbye    = ctlGoodbye
)

// GoodbyeTimeout is how long Close waits for the goodbyes to peers.
func GoodbyeTimeout(peers int) time.Duration { return goodbyeTimeout(peers) }

// IsClosed reports whether rt was closed (Close, or Finalize).
func IsClosed(rt *Runtime) bool { return rt.isClosed() }

// NoteFailure makes rt act as if it had seen proc fail.
func NoteFailure(rt *Runtime, proc transport.Proc) { rt.noteFailure(proc) }

// Fence makes rt act as if a peer had told it that it was replaced.
func Fence(rt *Runtime, why string) { rt.fence(why) }

// DetectorEvents subscribes to rt's failure detector.
func DetectorEvents(rt *Runtime) <-chan health.Event { return rt.det.Subscribe() }

// SetLanding sets rt's mark of a frame from proc being applied: 1 + the
// frame's epoch, 0 for none.
func SetLanding(rt *Runtime, proc transport.Proc, landing uint64) {
	rt.peers.get(proc).landing.Store(landing)
}

// AppEpoch is the epoch the program on rt acknowledged (Init, Recover).
func AppEpoch(rt *Runtime) uint32 { return rt.appEpoch.Load() }

// ProvideMemory answers proc's request for the memory of segment key, as
// rt does for a peer on its host.
func ProvideMemory(rt *Runtime, proc transport.Proc, key uint64) (int, uint64, error) {
	return rt.provideMemory(proc, key)
}

// SegmentInode is the inode of the memfd behind rt's shared segment id:
// it changes when the segment moves to new memory.
func SegmentInode(rt *Runtime, id segments.ID) (uint64, error) {
	rt.segMu.RLock()
	defer rt.segMu.RUnlock()
	si := rt.segs[id]
	fd, err := si.backing.Dup(si.seg.Bytes())
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ViewProcs returns the live processes and the idle spares of rt's
// current view, in Proc order.
func ViewProcs(rt *Runtime) (live, spares []transport.Proc) {
	v := rt.view.Load()
	return v.liveProcs(), v.spares
}

// SetViewWaitHook makes f run where Recover and a spare's wait for
// promotion have taken the view and before they look at the halt, until
// the test ends.
func SetViewWaitHook(t interface{ Cleanup(func()) }, f func(*Runtime)) {
	old := viewWaitHook
	viewWaitHook = f
	t.Cleanup(func() { viewWaitHook = old })
}

// Halted is why rt stopped for good (nil while it has not).
func Halted(rt *Runtime) error { return rt.halted() }
