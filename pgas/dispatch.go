package pgas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// FrameControl.A values.
const (
	// ctlGoodbye: the sender is closing its runtime.
	ctlGoodbye = 1
	// ctlFenced: the sender's committed view declares the receiver failed.
	ctlFenced = 2
	// ctlWake (directnote.go) is 3, ctlCollWake (collshm.go) 4,
	// ctlCollNoArea (collshm.go) 5.
)

// callbacks is the runtime as the transport and the failure detector see
// it: the transport hands it frames and lost connections, the detector
// sends heartbeats through it. These are the runtime's plumbing, kept off
// Runtime's exported methods.
type callbacks struct{ rt *Runtime }

var (
	_ transport.Handler = callbacks{}
	_ health.Sender     = callbacks{}
)

// HandleFrame implements transport.Handler (handleFrame).
func (c callbacks) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	return c.rt.handleFrame(from, h, p)
}

// PeerDown implements transport.Handler (peerDown).
func (c callbacks) PeerDown(proc transport.Proc, err error) { c.rt.peerDown(proc, err) }

// SendHealth implements health.Sender (sendHealth).
func (c callbacks) SendHealth(ctx context.Context, to transport.Proc, payload []byte) error {
	return c.rt.sendHealth(ctx, to, payload)
}

// handleFrame applies one frame from a peer. It runs on the transport's
// reader goroutine for from, so it never blocks on a send: replies go
// through the peer's outbox.
func (rt *Runtime) handleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	if !rt.knownSender(from) {
		rt.stats.FramesRejected.Add(1)
		p.Discard()
		return fmt.Errorf("pgas: frame from proc %d, which no view this process applied lists as a process of the job", from)
	}
	rt.frames.to(from).Received(uint8(h.Type), p.Len())
	if h.Ack != 0 && h.Type != transport.FrameAck && !rt.view.Load().failed[from] {
		rt.peers.get(from).ack(h.Ack) // a cumulative ack riding on this frame
	}
	// Landing is published before the view is read (admit), never after:
	// either admit sees a view that refuses the frame, or a Recover of
	// that view sees the frame landing and waits for it (drainLanding).
	// Published after admit, a frame admitted just before the view
	// changed could begin to land once Recover had looked and returned.
	// A refused frame lands nothing: its mark goes before its payload is
	// discarded, which Recover has no reason to wait for.
	pr := rt.peers.get(from)
	pr.landing.Store(uint64(h.Epoch) + 1)
	if err := rt.admit(from, h); err != nil {
		pr.landing.Store(0)
		return rt.refuse(from, h, p, err)
	}
	defer pr.landing.Store(0)
	switch h.Type {
	case transport.FrameWrite:
		return rt.handleWrite(from, h, p)
	case transport.FrameNotify:
		seg, err := rt.notifyTarget(h.Seg, h.A, h.B)
		rt.appliedNotify(from, h, seg, err)
		return err
	case transport.FrameAck:
		peer := pr
		if h.Flags&transport.FlagAck != 0 {
			rt.requestedAck(from)
			return p.Discard()
		}
		if h.A == codeFenced {
			// The target's committed view says this process was replaced.
			rt.fence(fmt.Sprintf("proc %d refused a frame: this process is declared failed", from))
		}
		if h.A != codeOK {
			rt.stats.RemoteErrors.Add(1)
			peer.nack(h.Seq, h.A)
		} else {
			peer.ack(h.Seq)
		}
		return p.Discard()
	case transport.FrameReadReq:
		rt.handleReadReq(from, h)
		return p.Discard()
	case transport.FrameReadResp, transport.FrameAtomicResp:
		return rt.handleResponse(from, h, p)
	case transport.FrameAtomicReq:
		old, err := rt.localAtomic(h.Seg, int64(h.Off), h.Flags, h.A, h.B)
		resp := transport.Header{Type: transport.FrameAtomicResp, Seq: h.Seq, A: old, B: codeOf(err)}
		rt.reply(from, resp, nil)
		return p.Discard()
	case transport.FramePassive:
		return rt.handlePassive(from, h, p)
	case transport.FrameColl:
		return rt.mail.deliver(from, h, p)
	case transport.FrameHeartbeat:
		return rt.handleHeartbeat(from, p)
	case transport.FrameControl:
		return rt.handleControl(from, pr, h, p)
	}
	rt.stats.FramesRejected.Add(1)
	p.Discard()
	return fmt.Errorf("pgas: unexpected frame type %d from proc %d", h.Type, from)
}

// refuse answers a frame that admit refused with err: the frame is
// dropped; a fenced sender is told so once; a frame that wants an answer
// (an acknowledgement, a read or an atomic) gets a refusal; a response to
// a request of an older epoch fails that request.
func (rt *Runtime) refuse(from transport.Proc, h *transport.Header, p transport.Payload, err error) error {
	rt.stats.FramesRejected.Add(1)
	p.Discard()
	if errors.Is(err, ErrFenced) && rt.peers.get(from).toldFenced.CompareAndSwap(false, true) {
		// A replaced process may never hear it from the membership (it
		// left the Raft configuration) and its unacknowledged frames
		// are dropped silently: tell it once.
		rt.reply(from, transport.Header{Type: transport.FrameControl, A: ctlFenced}, nil)
	}
	switch {
	case h.Flags&transport.FlagAck != 0:
		rt.queueNack(from, h.Seq, codeOf(err))
	case h.Type == transport.FrameReadReq:
		rt.reply(from, transport.Header{Type: transport.FrameReadResp, Seq: h.Seq, A: codeOf(err)}, nil)
	case h.Type == transport.FrameAtomicReq:
		rt.reply(from, transport.Header{Type: transport.FrameAtomicResp, Seq: h.Seq, B: codeOf(err)}, nil)
	case h.Type == transport.FrameReadResp || h.Type == transport.FrameAtomicResp:
		// The answer to a request of an older epoch: its data is not
		// applied, and the request fails (it would wait for ever).
		rt.failRequests(func(r *request) bool { return r.id == h.Seq && r.proc == from }, err)
	}
	return err
}

// handleControl applies a FrameControl frame from a peer, by its h.A.
func (rt *Runtime) handleControl(from transport.Proc, pr *peer, h *transport.Header, p transport.Payload) error {
	switch h.A {
	case ctlGoodbye:
		pr.departed.Store(true)
		rt.spareSeesEnd()
	case ctlFenced:
		rt.fence(fmt.Sprintf("proc %d refused a frame: its committed view declares this process failed", from))
		return p.Discard()
	case ctlCollWake:
		rt.coll.Wake()
		return p.Discard()
	case ctlCollNoArea:
		rt.log.Debug("a member has no collective area", "proc", from, "key", h.Off)
		rt.recordNoArea(h.Off)
		return p.Discard()
	case ctlWake:
		if seg, err := rt.localSeg(h.Seg); err == nil {
			seg.Wake()
		}
		return p.Discard()
	}
	rt.applied(from, h, nil)
	return p.Discard()
}

// knownSender reports whether from is a process of the job in the stored
// view, so that a frame from it may be looked at (admit then judges it).
// A process that joined the job sends once a committed view lists it,
// and this process may not have applied that view yet (views reach
// processes at different times, and skip): its frame waits for it, at
// most joinWait, rather than be dropped (a collective would wait for it
// for ever, and a sequenced frame's acknowledgement never come). Only
// this sender's frames wait: the transport reads each sender on its own.
func (rt *Runtime) knownSender(from transport.Proc) bool {
	if rt.peers.has(from) && rt.view.Load().isProc(from) {
		return true
	}
	if from == transport.NoProc || int64(from) >= maxProcID {
		return false
	}
	rt.log.Debug("a frame from a process this one has not learnt yet waits for the view that lists it", "from", from, "bound", joinWait)
	t := time.NewTimer(joinWait)
	defer t.Stop()
	for {
		v, ch := rt.viewAndChan() // under viewMu: has and the view agree
		if rt.peers.has(from) && v.isProc(from) {
			return true
		}
		if rt.isClosed() || rt.halted() != nil {
			return false
		}
		select {
		case <-ch:
		case <-rt.closed:
			return false
		case <-t.C:
			rt.log.Warn("dropped a frame from a process no view this process applied lists; if it joined the job, this process's membership lags",
				"from", from, "epoch", v.epoch, "waited", joinWait)
			return false
		}
	}
}

// joinWait bounds how long a frame from a process this one has not learnt
// yet waits for the view that lists it (knownSender). Views reach every
// process within a membership round trip or two; one still missing after
// this is a membership that has lost touch, which the detector and the
// membership's own bounds deal with.
const joinWait = 30 * time.Second

// admit decides whether a frame may be applied. Epoch fencing lives here:
// nothing from a process declared failed, and nothing sequenced from an
// older epoch, is ever applied. Detector traffic is exempt from the epoch
// check (it is what finds out about epochs), not from the failed check.
func (rt *Runtime) admit(from transport.Proc, h *transport.Header) error {
	v := rt.view.Load()
	if v.failed[from] {
		return fmt.Errorf("pgas: frame from proc %d, declared failed: %w", from, ErrFenced)
	}
	if h.Epoch < v.epoch && h.Type != transport.FrameHeartbeat && h.Type != transport.FrameAck {
		return fmt.Errorf("pgas: frame from proc %d with epoch %d < %d: %w", from, h.Epoch, v.epoch, ErrStaleEpoch)
	}
	// A sender ahead of us applied a newer view first: fine, ours follows.
	// Recover waits for it (a retry in the older epoch would pair this
	// process's collectives with another laggard's, out of step).
	if h.Epoch > v.epoch {
		for old := rt.aheadEpoch.Load(); uint64(h.Epoch) > old && !rt.aheadEpoch.CompareAndSwap(old, uint64(h.Epoch)); old = rt.aheadEpoch.Load() {
		}
	}
	return nil
}

func (rt *Runtime) handleWrite(from transport.Proc, h *transport.Header, p transport.Payload) error {
	si, err := rt.pinSegApply(h.Seg)
	var dst []byte
	if err == nil {
		defer si.unpinApply()
		dst, err = si.seg.Slice(int64(h.Off), int64(h.Len))
		if err != nil || h.Off > 1<<62 {
			err = fmt.Errorf("pgas: write from proc %d: %w: %v", from, ErrBounds, err)
		} else if h.Flags&transport.FlagDirect != 0 {
			err = fmt.Errorf("pgas: write from proc %d: a doorbell (data copied beforehand), which no process of this version sends: %w", from, ErrInvalid)
		}
	}
	if err != nil {
		p.Discard()
		rt.stats.FramesRejected.Add(1)
		rt.applied(from, h, err)
		return err
	}
	if err := p.ReadInto(dst); err != nil {
		return err // the connection is failing; peerDown follows
	}
	var nseg *segments.Segment
	if h.Flags&transport.FlagNotify != 0 {
		nseg, err = rt.notifyTarget(h.Seg, h.A, h.B)
	}
	rt.appliedNotify(from, h, nseg, err)
	return err
}

// notifyTarget checks a notification before it is set and returns its
// segment.
func (rt *Runtime) notifyTarget(segID uint16, id, val uint64) (*segments.Segment, error) {
	seg, err := rt.localSeg(segID)
	if err != nil {
		return nil, err
	}
	if id >= uint64(seg.NumNotifications()) || val > 0xffffffff {
		return nil, fmt.Errorf("pgas: notification %d=%d: %w", id, val, ErrInvalid)
	}
	return seg, nil
}

// appliedNotify records a sequenced frame as applied (or refused with
// err), then sets its notification (seg non-nil), then schedules the ack.
// Recording first means that a process which sees the notification and
// closes at once still acknowledges the frame (see sayGoodbye).
func (rt *Runtime) appliedNotify(from transport.Proc, h *transport.Header, seg *segments.Segment, err error) {
	start := rt.recordApplied(from, h, err)
	if seg != nil && err == nil {
		// In the frame's epoch, which admit found not older than ours: a
		// value of an older epoch would not count (design §3).
		seg.SetNotificationIn(segments.NotificationID(h.A), uint32(h.B), h.Epoch)
	}
	if start {
		rt.enqueue(from, outJob{ack: true})
	}
}

// peerDown: the connection to proc was lost.
func (rt *Runtime) peerDown(proc transport.Proc, err error) {
	if !rt.peers.has(proc) {
		return
	}
	rt.stats.PeersDown.Add(1)
	rt.noteFailure(proc)
	rt.cutOff(proc, err)
}

// sendHealth sends a detector message to proc in a FrameHeartbeat frame.
func (rt *Runtime) sendHealth(ctx context.Context, to transport.Proc, payload []byte) error {
	h := transport.Header{Type: transport.FrameHeartbeat}
	return rt.send(ctx, to, &h, payload)
}

func (rt *Runtime) handleHeartbeat(from transport.Proc, p transport.Payload) error {
	if rt.det == nil || p.Len() > 4096 {
		return p.Discard()
	}
	buf := make([]byte, p.Len())
	if err := p.ReadInto(buf); err != nil {
		return err
	}
	return rt.det.Deliver(from, buf)
}

func (rt *Runtime) handleReadReq(from transport.Proc, h *transport.Header) {
	resp := transport.Header{Type: transport.FrameReadResp, Seq: h.Seq}
	seg, unpin, err := rt.pinSeg(h.Seg)
	var data []byte
	if err == nil {
		if h.A > transport.MaxPayload {
			err = ErrInvalid
		} else if data, err = seg.Slice(int64(h.Off), int64(h.A)); err != nil || h.Off > 1<<62 {
			err = ErrBounds
		}
	}
	if err != nil {
		resp.A = codeOf(err)
		data = nil
		if unpin != nil {
			unpin()
			unpin = nil
		}
	}
	// The reply is sent later by the outbox goroutine, straight from segment
	// memory, like an RDMA read: it sees the segment as it is then, and the
	// segment stays pinned until then.
	rt.enqueue(from, outJob{h: resp, payload: data, done: unpin})
}

func (rt *Runtime) handleResponse(from transport.Proc, h *transport.Header, p transport.Payload) error {
	rt.reqMu.Lock()
	r := rt.reqs[h.Seq]
	if r != nil && r.proc == from {
		delete(rt.reqs, h.Seq)
		rt.peers.get(from).reqsOut.Add(-1)
	} else {
		r = nil
	}
	rt.reqMu.Unlock()
	if r == nil {
		p.Discard()
		return fmt.Errorf("pgas: response %d from proc %d matches no request", h.Seq, from)
	}
	var err error
	switch h.Type {
	case transport.FrameReadResp:
		if h.A != codeOK {
			err = fmt.Errorf("%w: %w", ErrRemote, errOf(h.A))
			p.Discard()
		} else if p.Len() != len(r.dst) {
			err = fmt.Errorf("pgas: read response of %d bytes for %d requested: %w", p.Len(), len(r.dst), ErrInvalid)
			p.Discard()
		} else if rerr := p.ReadInto(r.dst); rerr != nil {
			err = fmt.Errorf("%w: %v", ErrRankFailed, rerr)
		}
	case transport.FrameAtomicResp:
		r.val = h.A
		if h.B != codeOK {
			err = fmt.Errorf("%w: %w", ErrRemote, errOf(h.B))
		}
		p.Discard()
	}
	r.err = err
	close(r.done)
	return nil
}

func (rt *Runtime) handlePassive(from transport.Proc, h *transport.Header, p transport.Payload) error {
	if p.Len() > MaxPassive {
		p.Discard()
		rt.applied(from, h, ErrInvalid)
		return fmt.Errorf("pgas: passive message of %d bytes from proc %d: %w", p.Len(), from, ErrInvalid)
	}
	buf := make([]byte, p.Len())
	if err := p.ReadInto(buf); err != nil {
		return err
	}
	rank := rt.view.Load().rankIn(from)
	if !rt.passive.push(rank, buf) {
		rt.applied(from, h, errBusy)
		return fmt.Errorf("pgas: passive inbox full, message from proc %d refused", from)
	}
	rt.applied(from, h, nil)
	return nil
}
