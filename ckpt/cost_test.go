package ckpt

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// frameCount is what one process sent while a counter was on.
type frameCount struct {
	frames, bytes uint64
	byType        map[transport.FrameType]uint64
}

// counter counts the frames each process sends, heartbeats and
// membership control left out (they are the detector's and the
// membership's cost, not the checkpointer's).
type counter struct {
	mu  sync.Mutex
	on  bool
	per map[transport.Proc]*frameCount
}

func countFrames(nw *mem.Network) *counter {
	c := &counter{per: map[transport.Proc]*frameCount{}}
	nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
		if h.Type == transport.FrameHeartbeat || h.Type == transport.FrameControl {
			return mem.Deliver
		}
		c.mu.Lock()
		if c.on {
			fc := c.per[from]
			if fc == nil {
				fc = &frameCount{byType: map[transport.FrameType]uint64{}}
				c.per[from] = fc
			}
			fc.frames++
			fc.bytes += uint64(h.Len) + transport.HeaderSize
			fc.byType[h.Type]++
		}
		c.mu.Unlock()
		return mem.Deliver
	})
	return c
}

func (c *counter) start() {
	c.mu.Lock()
	c.on, c.per = true, map[transport.Proc]*frameCount{}
	c.mu.Unlock()
}

func (c *counter) stop() map[transport.Proc]*frameCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.per
}

func TestMeasureCost(t *testing.T) {
	for _, n := range []int{16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			j := newTestJob(t, jobOpts{ranks: n})
			fc := countFrames(j.nw)
			fc.start()
			j.checkpoint(1)
			ck := fc.stop()
			fc.start()
			j.each(j.live(), func(r int) error {
				_, err := j.ranks[r].ck.Restore(j.ctx)
				return err
			})
			rs := fc.stop()
			t.Logf("n=%d ckpt rank5 %+v restore rank5 %+v", n, *ck[5], *rs[5])
		})
	}
}
