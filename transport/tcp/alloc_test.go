package tcp

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// A stream of small frames allocates nothing per frame, at either end:
// the reader lends one Header to the handler for every frame (the
// transport package's contract), and a frame sent or batched is copied,
// never kept. (The one-sided runtime sends tens of thousands a second;
// two allocations a frame made the 8-byte message rate pay for the
// garbage collector.)
func TestSmallFrameStreamAllocatesNothingPerFrame(t *testing.T) {
	const warm, frames = 1000, 20000
	ts := newCluster(t, 2, nil)
	var got atomic.Int64
	done := make(chan struct{})
	buf := make([]byte, 8)
	rx := newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		if err := p.ReadInto(buf[:p.Len()]); err != nil {
			return err
		}
		if got.Add(1) == warm+frames {
			close(done)
		}
		return nil
	})
	for i, h := range []transport.Handler{newHandler(nil), rx} {
		if err := ts[i].Start(h); err != nil {
			t.Fatal(err)
		}
	}
	ctx := transporttest.Context(t, wait)
	payload := []byte("8 bytes!")
	h := transport.Header{Type: transport.FrameWrite}
	send := func(n int) {
		for i := range n {
			h.Seq = uint64(i)
			if err := ts[0].SendLater(ctx, 1, &h, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(warm)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	send(frames)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d of %d frames arrived", got.Load(), warm+frames)
	}
	runtime.ReadMemStats(&after)
	if per := float64(after.Mallocs-before.Mallocs) / frames; per > 0.1 {
		t.Errorf("%.2f allocations a frame over %d frames (both ends, the test's goroutines included), want none", per, frames)
	}
}
