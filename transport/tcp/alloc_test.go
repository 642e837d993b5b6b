package tcp

import (
	"context"
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
	ts := newCluster(t, 2, nil)
	transporttest.NoFrameAllocs(t, ts[0], ts[1], func(ctx context.Context, h *transport.Header, payload []byte) error {
		return ts[0].SendLater(ctx, 1, h, payload)
	})
}
