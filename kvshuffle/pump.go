package kvshuffle

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/gaspigo/gaspigo/pgas"
)

// pump writes sealed frames into the receivers' rings. It owns the
// frames' headers once they are queued, the control frame area, and the
// pgas queue Config.Queue.
func (o *oside) pump(ctx context.Context) error {
	s := o.s
	posted := 0
	for {
		p, it, ok := o.pick()
		if !ok {
			if err := o.absorbCredits(); err != nil {
				return err
			}
			p, it, ok = o.pick()
		}
		if !ok {
			if posted > 0 {
				if err := s.rt.Wait(ctx, s.cfg.Queue); err != nil {
					return err
				}
				posted = 0
			}
			if _, err := s.rt.NotifyWaitSome(ctx, s.cfg.SegmentID, s.lay.creditNotif(0), len(o.dests)+1); err != nil {
				return err
			}
			s.seg.ResetNotification(s.lay.pumpWake())
			continue
		}
		if posted >= s.cfg.MaxPosted {
			if err := s.rt.Wait(ctx, s.cfg.Queue); err != nil {
				return err
			}
			posted = 0
		}
		if err := o.write(ctx, p, it); err != nil {
			return err
		}
		posted++
		o.complete(p)
	}
}

// pick chooses the next frame to write: in a strict pass the head of the
// current step's destination (or nothing while it lacks credit), else the
// first destination in schedule order that has a frame and a credit.
func (o *oside) pick() (int, item, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.dests)
	slots := uint64(o.s.cfg.Slots)
	if o.strict {
		for o.step < n {
			p := o.sched(o.step)
			d := &o.dests[p]
			if len(d.q) == 0 {
				o.step++
				continue
			}
			if d.sent-d.acked >= slots {
				o.s.st.creditWaits.Add(1)
				return 0, item{}, false
			}
			return p, d.q[0], true
		}
		o.strict = false
		o.signalLocked()
	}
	waiting := false
	for k := range n {
		p := k
		if o.s.cfg.Schedule == Diagonal {
			p = (o.cursor + k) % n
		}
		d := &o.dests[p]
		if len(d.q) == 0 {
			continue
		}
		if d.sent-d.acked >= slots {
			waiting = true
			continue
		}
		if o.s.cfg.Schedule == Diagonal {
			o.cursor = (p + 1) % n
		}
		return p, d.q[0], true
	}
	if waiting {
		o.s.st.creditWaits.Add(1)
	}
	return 0, item{}, false
}

// sched is the destination of step k of a pass.
func (o *oside) sched(k int) int {
	if o.s.cfg.Schedule == Naive {
		return k
	}
	return (o.s.oIdx + k) % len(o.dests)
}

// write posts one frame to partition p's receiver: into this task's ring
// there, at the slot of the frame's sequence number, with the cumulative
// count as the notification value.
func (o *oside) write(ctx context.Context, p int, it item) error {
	s := o.s
	d := &o.dests[p] // sent is written only by the pump
	seq := d.sent + 1
	mem := s.seg.Bytes()
	var local int64
	if it.buf >= 0 {
		local = s.lay.bufAt(p, it.buf)
		binary.LittleEndian.PutUint32(mem[local+12:], uint32(seq))
	} else {
		local = s.lay.ctlOff
		putFrameHeader(mem[local:], frameHdr{kind: it.kind, len: it.n, gen: s.gen.Load(), seq: uint32(seq)})
		if it.kind == frameMarker {
			binary.LittleEndian.PutUint64(mem[local+frameHeader:], it.val)
		}
	}
	remote := pgas.Loc{Seg: s.cfg.SegmentID, Off: s.lay.ringOff(s.oIdx, int(d.sent%uint64(s.cfg.Slots)))}
	err := s.rt.WriteNotify(ctx, s.cfg.Queue, d.rank, remote, pgas.Loc{Seg: s.cfg.SegmentID, Off: local},
		int64(frameHeader+it.n), s.lay.dataNotif(s.oIdx), encodeCount(seq))
	if err != nil {
		return fmt.Errorf("frame %d to rank %d: %w", seq, d.rank, err)
	}
	s.st.framesSent.Add(1)
	return nil
}

// complete retires partition p's head frame after it was written: its
// buffer may be reused at once (pgas copied it out).
func (o *oside) complete(p int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := &o.dests[p]
	it := d.q[0]
	d.q = append(d.q[:0], d.q[1:]...)
	if it.buf >= 0 {
		d.free = append(d.free, it.buf)
	}
	d.sent++
	maxInto(&o.s.st.maxInFlight, int64(d.sent-d.acked))
	o.signalLocked()
}

// absorbCredits reads the credit notifications: each carries the
// receiver's cumulative count of frames consumed from this task.
func (o *oside) absorbCredits() error {
	s := o.s
	s.seg.ResetNotification(s.lay.pumpWake())
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := false
	for p := range o.dests {
		v, _ := s.seg.ResetNotification(s.lay.creditNotif(p))
		if v == 0 {
			continue
		}
		d := &o.dests[p]
		if v&0x8000_0000 == 0 {
			return &AbortError{Rank: d.rank}
		}
		c := extendCount(d.acked, v)
		if c > d.sent {
			return corrupt(fmt.Sprintf("credit from rank %d", d.rank), 0, "%d frames consumed, only %d sent", c, d.sent)
		}
		if c > d.acked {
			d.acked = c
			changed = true
		}
	}
	if changed {
		o.signalLocked()
	}
	return nil
}
