package ckpt

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// cost is what one process sent while a counter was on.
type cost struct {
	coll        uint64 // collective frames (pgas allreduces, allgathers)
	other       uint64 // every other frame but acks: writes, reads, atomics
	otherBytes  uint64 // their bytes, headers included
	acks        uint64 // acks (a receiver may ack several frames at once)
	largestSent uint32 // the largest payload of a frame other than a collective's (checkpoint data)
}

// frameCounter counts the frames each process sends, heartbeats and
// membership control left out (the detector's and the membership's cost,
// not the checkpointer's).
type frameCounter struct {
	mu  sync.Mutex
	on  bool
	per map[transport.Proc]*cost
}

func countFrames(nw *mem.Network) *frameCounter {
	c := &frameCounter{}
	nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
		if h.Type == transport.FrameHeartbeat || h.Type == transport.FrameControl {
			return mem.Deliver
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.on {
			return mem.Deliver
		}
		fc := c.per[from]
		if fc == nil {
			fc = &cost{}
			c.per[from] = fc
		}
		switch h.Type {
		case transport.FrameColl:
			fc.coll++
		case transport.FrameAck:
			fc.acks++
		default:
			fc.other++
			fc.otherBytes += uint64(h.Len) + transport.HeaderSize
			fc.largestSent = max(fc.largestSent, h.Len)
		}
		return mem.Deliver
	})
	return c
}

// during counts the frames f makes every process send.
func (c *frameCounter) during(f func()) map[transport.Proc]cost {
	c.mu.Lock()
	c.on, c.per = true, map[transport.Proc]*cost{}
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	out := map[transport.Proc]cost{}
	for p, fc := range c.per {
		out[p] = *fc
	}
	return out
}

// A checkpoint (Start and Commit) and a restore cost a rank the same
// point-to-point messages and bytes whatever the number of ranks N, and a
// fixed number of allreduces (O(log N) frames each): nothing is gathered
// from every rank (package doc, "Cost"). The two segment re-creations of
// a restore are pgas SegmentCreate exchanges, whose cost is pgas's: they
// are measured alone and taken out.
func TestCostFlatInN(t *testing.T) {
	sizes := []int{16, 64, 256}
	if testing.Short() {
		sizes = sizes[:2]
	}
	const survivor = 5
	var first struct{ ck, rs cost }
	for i, n := range sizes {
		t.Run(fmt.Sprint("ranks=", n), func(t *testing.T) {
			j := newTestJob(t, jobOpts{ranks: n})
			fc := countFrames(j.nw)
			ck := fc.during(func() { j.checkpoint(1) })[survivor]
			j.advance(2)
			rs := fc.during(func() {
				j.each(j.live(), func(r int) error {
					_, err := j.ranks[r].ck.Restore(j.ctx)
					return err
				})
			})[survivor]
			j.checkAll(1)
			seg := fc.during(func() {
				j.each(j.live(), func(r int) error {
					_, err := j.ranks[r].rt.SegmentCreate(j.ctx, j.cfg.SegmentID, localSizeOf(j.cfg, n), nil)
					return err
				})
			})[survivor]
			t.Logf("per rank: checkpoint %+v; restore %+v, of which 2 x SegmentCreate %+v", ck, rs, seg)
			logN := uint64(bits.Len(uint(n - 1)))
			allreduce := 2*logN + 2 // frames of one allreduce, with room
			if ck.coll > allreduce {
				t.Errorf("a checkpoint sent %d collective frames, more than one allreduce (%d)", ck.coll, allreduce)
			}
			if own := rs.coll - 2*seg.coll; own > 3*allreduce {
				t.Errorf("a restore sent %d collective frames besides its 2 segment exchanges (%d each), more than 3 allreduces (%d)", own, seg.coll, 3*allreduce)
			}
			if ck.acks > ck.other || rs.acks > rs.other {
				t.Errorf("more acks than frames to ack: checkpoint %+v, restore %+v", ck, rs)
			}
			if rs.largestSent > 1024 {
				t.Errorf("a surviving rank sent a frame of %d bytes in a restore without a failure: only a lost rank's data should move", rs.largestSent)
			}
			if i == 0 {
				first.ck, first.rs = ck, rs
				return
			}
			if ck.other != first.ck.other || ck.otherBytes != first.ck.otherBytes {
				t.Errorf("checkpoint: %d messages, %d bytes with %d ranks; %d and %d with %d", ck.other, ck.otherBytes, n, first.ck.other, first.ck.otherBytes, sizes[0])
			}
			if rs.other != first.rs.other || rs.otherBytes != first.rs.otherBytes {
				t.Errorf("restore: %d messages, %d bytes with %d ranks; %d and %d with %d", rs.other, rs.otherBytes, n, first.rs.other, first.rs.otherBytes, sizes[0])
			}
		})
	}
}
