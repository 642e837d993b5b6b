package transporttest

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// NoFrameAllocs starts tx and rx (two transports of one cluster, not
// started), sends a stream of 8-byte frames from tx to rx with send (a
// warm-up, then 20,000 more), and fails t when the measured part cost
// a tenth of a heap allocation a frame or more, both ends and the test's
// own goroutines included: a transport that lends the handler one Header
// for every frame and keeps nothing of a Send allocates nothing a frame.
func NoFrameAllocs(t testing.TB, tx, rx transport.Transport, send func(ctx context.Context, h *transport.Header, payload []byte) error) {
	t.Helper()
	const warm, frames = 1000, 20000
	var got atomic.Int64
	done := make(chan struct{})
	buf := make([]byte, 8)
	recv := &handlerFunc{frame: func(_ transport.Proc, _ *transport.Header, p transport.Payload) error {
		if err := p.ReadInto(buf[:p.Len()]); err != nil {
			return err
		}
		if got.Add(1) == int64(warm+frames) {
			close(done)
		}
		return nil
	}}
	if err := tx.Start(&handlerFunc{}); err != nil {
		t.Fatal(err)
	}
	if err := rx.Start(recv); err != nil {
		t.Fatal(err)
	}
	ctx := Context(t, 30*time.Second)
	payload := []byte("8 bytes!")
	h := transport.Header{Type: transport.FrameWrite}
	stream := func(n int) {
		for i := range n {
			h.Seq = uint64(i)
			if err := send(ctx, &h, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream(warm)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stream(frames)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d of %d frames arrived", got.Load(), warm+frames)
	}
	runtime.ReadMemStats(&after)
	if per := float64(after.Mallocs-before.Mallocs) / frames; per >= 0.1 {
		t.Errorf("%.2f allocations a frame over %d frames (both ends, the test's goroutines included), want none", per, frames)
	}
}
