package pgas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Queue names one of the runtime's queues, 0..NumQueues-1.
type Queue int

// Loc is a place in a segment: segment ID and byte offset.
type Loc struct {
	Seg segments.ID
	Off int64
}

// queue tracks the operations posted since the last Wait.
type queue struct {
	mu       sync.Mutex
	pending  []pendingOp
	reserved int // places taken by posts in progress

	// mem is the peer memory the queue's last operation done in memory
	// went to (postMem); counts are what postMem did since the last Wait,
	// added to the runtime's statistics there. Under mu.
	mem    memTarget
	counts directCounts
	// merged counts the operations done in memory since the last Wait
	// that share the pending entry before them (same rank and slots: one
	// fence covers them).
	merged int
}

// posted is the number of operations posted since the last Wait. The
// caller holds mu.
func (qu *queue) posted() int { return len(qu.pending) + qu.reserved + qu.merged }

// pendingOp is one posted operation: a sequenced frame awaiting the
// target's ack, or a request awaiting its response.
type pendingOp struct {
	rank int
	peer *peer
	seq  uint64
	req  *request
	op   string
	// notes, for an operation done in the peer's memory (postDirect):
	// the area Wait fences, in epoch (the view the operation ran in);
	// stale when a slot held a value of a newer epoch, so the
	// notification was not set and Wait must fail.
	notes *segments.PeerNotes
	epoch uint32
	stale bool
}

func (rt *Runtime) queue(q Queue, op string) (*queue, error) {
	if err := rt.check(); err != nil {
		return nil, err
	}
	if q < 0 || int(q) >= len(rt.queues) {
		return nil, fmt.Errorf("pgas: %s: queue %d outside 0..%d: %w", op, q, len(rt.queues)-1, ErrInvalid)
	}
	return rt.queues[q], nil
}

// reserve takes a place in the queue for one more operation; the caller
// then either adds the operation or releases the place.
func (qu *queue) reserve(depth int, op string) error {
	qu.mu.Lock()
	defer qu.mu.Unlock()
	if qu.posted() >= depth {
		return fmt.Errorf("pgas: %s: %w: %d operations posted since the last Wait (QueueDepth %d)", op, ErrQueueFull, qu.posted(), depth)
	}
	qu.reserved++
	return nil
}

func (qu *queue) add(op pendingOp) {
	qu.mu.Lock()
	qu.reserved--
	qu.pending = append(qu.pending, op)
	qu.mu.Unlock()
}

// recycle gives ops, a list Wait took and is done with, back to the
// queue for the next posts when nothing was posted meanwhile, so that a
// window of posts does not allocate.
func (qu *queue) recycle(ops []pendingOp) {
	if cap(ops) == 0 || cap(ops) > 4096 {
		return
	}
	clear(ops) // drop the references
	qu.mu.Lock()
	if qu.pending == nil {
		qu.pending = ops[:0]
	}
	qu.mu.Unlock()
}

// drop forgets the operations posted since the last Wait: they belong to
// an epoch the program has left (Wait refused by a newer one, Recover).
func (qu *queue) drop() {
	qu.mu.Lock()
	qu.pending, qu.merged = nil, 0
	qu.mem = memTarget{}
	qu.mu.Unlock()
}

func (qu *queue) release() {
	qu.mu.Lock()
	qu.reserved--
	qu.mu.Unlock()
}

// reserve takes a place on queue q for an operation on rank, and finds
// the process holding rank in the view the operation runs in. The caller
// then adds the operation to the queue or releases the place.
func (rt *Runtime) reserve(q Queue, rank int, op string) (*queue, *view, transport.Proc, error) {
	qu, err := rt.queue(q, op)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := qu.reserve(rt.cfg.QueueDepth, op); err != nil {
		return nil, nil, 0, err
	}
	v, err := rt.current()
	if err != nil {
		qu.release()
		return nil, nil, 0, err
	}
	proc, err := rt.procOf(v, rank, op)
	if err != nil {
		qu.release()
		return nil, nil, 0, err
	}
	return qu, v, proc, nil
}

// post sends one sequenced frame to rank and records it on the queue, or
// does the operation in the target's memory (postDirect).
func (rt *Runtime) post(ctx context.Context, q Queue, rank int, h transport.Header, payload []byte, op string) error {
	qu, v, proc, err := rt.reserve(q, rank, op)
	if err != nil {
		return err
	}
	if proc == rt.self {
		qu.release()
		return rt.applyLocal(&h, payload)
	}
	pr := rt.peers.get(proc)
	if pr.isDown() {
		qu.release()
		return &RankError{Rank: rank, Op: op, Err: ErrRankFailed}
	}
	if h.Type == transport.FrameNotify || h.Type == transport.FrameWrite {
		if done, target, wake, stale := rt.postDirect(pr, proc, &h, payload, v.epoch); done {
			if wake {
				rt.wake(ctx, proc, h.Seg)
			}
			target.view, target.rank, target.seg = v, rank, segments.ID(h.Seg)
			qu.addMem(pendingOp{rank: rank, peer: pr, op: op, notes: target.Mem.Notes, epoch: v.epoch, stale: stale}, target)
			return nil
		}
	}
	return rt.postFrame(ctx, qu, pr, proc, rank, h, payload, op)
}

// postFrame is post sending the frame: h escapes to the transport here
// only, so that an operation done in memory allocates nothing.
func (rt *Runtime) postFrame(ctx context.Context, qu *queue, pr *peer, proc transport.Proc, rank int, h transport.Header, payload []byte, op string) error {
	h.Flags |= transport.FlagAck
	pr.sendMu.Lock()
	h.Seq = pr.nextSeq.Add(1)
	pr.sendHdr = h // (a transport keeps no Header after Send)
	err := rt.send(ctx, proc, &pr.sendHdr, payload)
	pr.sendMu.Unlock()
	if err != nil {
		// The sequence number stays used: a send cut by ctx may still
		// complete in the background (transport/tcp), and acks are
		// cumulative, so a gap is harmless while a reuse is not.
		qu.release()
		return rt.sendErr(ctx, err, rank, proc, op)
	}
	qu.add(pendingOp{rank: rank, peer: pr, seq: h.Seq, op: op})
	return nil
}

// applyLocal performs an operation addressed to this process itself.
func (rt *Runtime) applyLocal(h *transport.Header, payload []byte) error {
	switch h.Type {
	case transport.FrameWrite:
		seg, err := rt.localSeg(h.Seg)
		if err != nil {
			return err
		}
		if err := seg.CopyIn(int64(h.Off), payload); err != nil {
			return fmt.Errorf("pgas: write: %w: %v", ErrBounds, err)
		}
		if h.Flags&transport.FlagNotify != 0 {
			return rt.setNotification(h.Seg, h.A, h.B)
		}
		return nil
	case transport.FrameNotify:
		return rt.setNotification(h.Seg, h.A, h.B)
	}
	return fmt.Errorf("pgas: frame type %d cannot be applied locally: %w", h.Type, ErrInvalid)
}

func (rt *Runtime) setNotification(segID uint16, id, val uint64) error {
	seg, err := rt.localSeg(segID)
	if err != nil {
		return err
	}
	if id > 0xffff || val > 0xffffffff {
		return fmt.Errorf("pgas: notification %d=%d: %w", id, val, ErrInvalid)
	}
	if err := seg.SetNotification(segments.NotificationID(id), uint32(val)); err != nil {
		return fmt.Errorf("pgas: notification %d: %w: %v", id, ErrInvalid, err)
	}
	return nil
}

// Write copies size bytes from local to rank's remote location. It returns
// once the data has left local (the local range may be reused); Wait on q
// returns once it is in place at the target.
func (rt *Runtime) Write(ctx context.Context, q Queue, rank int, remote, local Loc, size int64) error {
	return rt.write(ctx, q, rank, remote, local, size, 0, 0, false, "write")
}

// WriteNotify is Write followed by setting notification id to val in the
// remote segment, after the data is in place there. val must be non-zero
// for NotifyWaitSome to see it.
func (rt *Runtime) WriteNotify(ctx context.Context, q Queue, rank int, remote, local Loc, size int64, id segments.NotificationID, val uint32) error {
	return rt.write(ctx, q, rank, remote, local, size, id, val, true, "write_notify")
}

func (rt *Runtime) write(ctx context.Context, q Queue, rank int, remote, local Loc, size int64, id segments.NotificationID, val uint32, notify bool, op string) error {
	src, err := rt.localRange(local, size, op)
	if err != nil {
		return err
	}
	if notify && val == 0 {
		return fmt.Errorf("pgas: %s: notification value 0 cannot be seen: %w", op, ErrInvalid)
	}
	if rt.postMem(ctx, q, rank, remote, src, notify, id, val, op) {
		return nil // (it checks the range against the target's memory)
	}
	if err := rt.checkRemote(rank, remote, size, op); err != nil {
		return err
	}
	// Split above the frame cap; only the last piece carries the notification.
	for {
		n := min(int64(len(src)), transport.MaxPayload)
		h := transport.Header{Type: transport.FrameWrite, Seg: uint16(remote.Seg), Off: uint64(remote.Off)}
		last := n == int64(len(src))
		if notify && last {
			h.Flags = transport.FlagNotify
			h.A, h.B = uint64(id), uint64(val)
		}
		if err := rt.post(ctx, q, rank, h, src[:n], op); err != nil {
			return err
		}
		if last {
			return nil
		}
		src = src[n:]
		remote.Off += n
	}
}

// Notify sets notification id to val in rank's segment seg, after every
// write this process posted to rank before it.
func (rt *Runtime) Notify(ctx context.Context, q Queue, rank int, seg segments.ID, id segments.NotificationID, val uint32) error {
	if val == 0 {
		return fmt.Errorf("pgas: notify: notification value 0 cannot be seen: %w", ErrInvalid)
	}
	if rt.postMem(ctx, q, rank, Loc{Seg: seg}, nil, true, id, val, "notify") {
		return nil
	}
	h := transport.Header{Type: transport.FrameNotify, Seg: uint16(seg), A: uint64(id), B: uint64(val)}
	return rt.post(ctx, q, rank, h, nil, "notify")
}

// Wait blocks until every operation posted on q since the last Wait is
// complete at its target (writes and notifications applied, reads landed).
// This is remote completion, stronger than GASPI's local completion: when
// Wait returns nil the data is in place. The queue is emptied whatever the
// outcome; the first error is returned (a *RankError for a failed peer).
func (rt *Runtime) Wait(ctx context.Context, q Queue) error {
	qu, err := rt.queue(q, "wait")
	if err != nil {
		if q >= 0 && int(q) < len(rt.queues) {
			// Emptied all the same (a newer epoch, a closed runtime): left
			// there, an operation of this epoch would be waited for by the
			// first Wait after Recover, whose refusal as stale would send
			// the program to recover again, in step no more with the
			// others' collectives.
			rt.queues[q].drop()
		}
		return err
	}
	qu.mu.Lock()
	ops := qu.pending
	qu.pending, qu.merged = nil, 0
	rt.flushCounts(qu)
	qu.mu.Unlock()
	// Timed unless every operation was done in memory: then Wait is a
	// fence or two, shorter than the clock's own cost, and counts as 0.
	if slices.ContainsFunc(ops, func(op pendingOp) bool { return op.notes == nil }) {
		defer waitSeries.time.ObserveSince(time.Now())
	} else {
		waitSeries.time.Observe(0)
	}
	var first error
	var fenced *segments.PeerNotes // fenced last, without error: it covers every store posted before this Wait
	var fencedIn uint32            // in this epoch
	for i, op := range ops {
		var err error
		switch {
		case op.notes != nil && op.notes == fenced && op.epoch == fencedIn && !op.stale:
		case op.notes != nil:
			if err = rt.fenceDirect(ctx, op); err == nil {
				fenced, fencedIn = op.notes, op.epoch
			}
		case op.req != nil:
			_, err = rt.waitRequest(ctx, op.req, op.rank, op.op)
		default:
			err = rt.waitAck(ctx, op)
		}
		if err != nil && first == nil {
			first = err
			if ctx.Err() != nil {
				// Put back what is still outstanding so a retry can wait again.
				qu.mu.Lock()
				qu.pending = append(ops[i:len(ops):len(ops)], qu.pending...)
				qu.mu.Unlock()
				return first
			}
		}
	}
	qu.recycle(ops)
	return first
}

// waitChan waits for ch to close, polling for SpinWait first.
func (rt *Runtime) waitChan(ctx context.Context, ch <-chan struct{}, op string) error {
	if rt.cfg.SpinWait > 0 {
		if spinOn(ch, rt.cfg.SpinWait) {
			return nil
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctxError(ctx, op)
	case <-rt.closed:
		return ErrClosed
	}
}

// NotifyWaitSome waits until one of the notifications [first, first+num) of
// local segment seg is set, and returns its ID. It does not consume it:
// call NotifyReset. It fails with ErrStaleEpoch when this process applied
// a view that dropped a notification of the range set during the wait
// (one set in the wait's epoch or later, not seen before the view): its
// writer was declared failed, or is behind, and what it announced must be
// set again after Recover.
func (rt *Runtime) NotifyWaitSome(ctx context.Context, seg segments.ID, first segments.NotificationID, num int) (segments.NotificationID, error) {
	s, err := rt.localSeg(uint16(seg))
	if err != nil {
		return 0, err
	}
	policy := segments.WaitPolicy{Spin: rt.cfg.SpinWait}
	if s.SharedNotes() {
		policy = rt.notePoll // a peer sets them without a frame: polling costs it nothing
	}
	id, err := s.WaitSome(ctx, first, num, policy)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctxError(ctx, "notify_waitsome")
		}
		if errors.Is(err, segments.ErrDropped) {
			return 0, fmt.Errorf("pgas: notify_waitsome: segment %d: a notification in [%d, %d) was set in an older epoch than this process's %d, which dropped it before this wait saw it; recover, then wait for it again: %w", seg, first, int(first)+num, rt.view.Load().epoch, ErrStaleEpoch)
		}
		return 0, fmt.Errorf("pgas: notify_waitsome: %w: %v", ErrInvalid, err)
	}
	return id, nil
}

// NotifyReset atomically reads notification id of local segment seg and
// sets it to zero, returning the value it had.
func (rt *Runtime) NotifyReset(seg segments.ID, id segments.NotificationID) (uint32, error) {
	s, err := rt.localSeg(uint16(seg))
	if err != nil {
		return 0, err
	}
	v, err := s.ResetNotification(id)
	if err != nil {
		return 0, fmt.Errorf("pgas: notify_reset: %w: %v", ErrInvalid, err)
	}
	return v, nil
}
