package shm

import (
	"context"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// A stream of small frames through a ring allocates nothing per frame:
// the reader lends one Header to the handler for the ring's life.
func TestSmallFrameStreamAllocatesNothingPerFrame(t *testing.T) {
	ts := newCluster(t, 2, nil)
	transporttest.NoFrameAllocs(t, ts[0], ts[1], func(ctx context.Context, h *transport.Header, payload []byte) error {
		return ts[0].Send(ctx, 1, h, payload)
	})
}
