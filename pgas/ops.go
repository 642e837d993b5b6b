package pgas

import (
	"context"
	"fmt"
	"sync"

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
}

// pendingOp is one posted operation: a sequenced frame awaiting the
// target's ack, or a request awaiting its response.
type pendingOp struct {
	rank int
	peer *peer
	seq  uint64
	req  *request
	op   string
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
	if len(qu.pending)+qu.reserved >= depth {
		return fmt.Errorf("pgas: %s: %w: %d operations posted since the last Wait (QueueDepth %d)", op, ErrQueueFull, len(qu.pending)+qu.reserved, depth)
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

func (qu *queue) release() {
	qu.mu.Lock()
	qu.reserved--
	qu.mu.Unlock()
}

// localRange resolves a local segment range.
func (rt *Runtime) localRange(l Loc, n int64, op string) ([]byte, error) {
	seg, err := rt.localSeg(uint16(l.Seg))
	if err != nil {
		return nil, fmt.Errorf("pgas: %s: local %w", op, err)
	}
	b, err := seg.Slice(l.Off, n)
	if err != nil {
		return nil, fmt.Errorf("pgas: %s: local segment %d: %w: %v", op, l.Seg, ErrBounds, err)
	}
	return b, nil
}

// checkRemote checks a remote range against the sizes learnt when the
// segment was created collectively. A segment not created collectively is
// checked by the target only.
func (rt *Runtime) checkRemote(rank int, l Loc, n int64, op string) error {
	if rank < 0 || rank >= rt.Size() {
		return fmt.Errorf("pgas: %s: rank %d outside 0..%d: %w", op, rank, rt.Size()-1, ErrInvalid)
	}
	rt.segMu.RLock()
	si := rt.segs[l.Seg]
	rt.segMu.RUnlock()
	if si == nil || si.sizes == nil || rank >= len(si.sizes) {
		return nil
	}
	size := si.sizes[rank]
	if size < 0 && rt.Vacant(rank) {
		// Vacant when the segment was created: the operation fails with
		// ErrVacant once it is checked against the program's view.
		return nil
	}
	if l.Off < 0 || n < 0 || l.Off > size || n > size-l.Off {
		return fmt.Errorf("pgas: %s: rank %d segment %d: range [%d, %d) outside [0, %d): %w", op, rank, l.Seg, l.Off, l.Off+n, size, ErrBounds)
	}
	return nil
}

// post sends one sequenced frame to rank and records it on the queue.
func (rt *Runtime) post(ctx context.Context, q Queue, rank int, h transport.Header, payload []byte, op string) error {
	qu, err := rt.queue(q, op)
	if err != nil {
		return err
	}
	if err := qu.reserve(rt.cfg.QueueDepth, op); err != nil {
		return err
	}
	added := false
	defer func() {
		if !added {
			qu.release()
		}
	}()
	v, err := rt.current()
	if err != nil {
		return err
	}
	proc, err := rt.procOf(v, rank, op)
	if err != nil {
		return err
	}
	if proc == rt.self {
		return rt.applyLocal(&h, payload)
	}
	pr := rt.peers[proc]
	if pr.isDown() {
		return &RankError{Rank: rank, Op: op, Err: ErrRankFailed}
	}
	h.Flags |= transport.FlagAck
	pr.sendMu.Lock()
	pr.nextSeq++
	h.Seq = pr.nextSeq
	err = rt.send(ctx, proc, &h, payload)
	pr.sendMu.Unlock()
	if err != nil {
		// The sequence number stays used: a send cut by ctx may still
		// complete in the background (transport/tcp), and acks are
		// cumulative, so a gap is harmless while a reuse is not.
		return rt.sendErr(ctx, err, rank, proc, op)
	}
	added = true
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
	if err := rt.checkRemote(rank, remote, size, op); err != nil {
		return err
	}
	if notify && val == 0 {
		return fmt.Errorf("pgas: %s: notification value 0 cannot be seen: %w", op, ErrInvalid)
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
	h := transport.Header{Type: transport.FrameNotify, Seg: uint16(seg), A: uint64(id), B: uint64(val)}
	return rt.post(ctx, q, rank, h, nil, "notify")
}

// Read copies size bytes from rank's remote location into local. Wait on q
// returns once the data is in local.
func (rt *Runtime) Read(ctx context.Context, q Queue, rank int, remote, local Loc, size int64) error {
	const op = "read"
	dst, err := rt.localRange(local, size, op)
	if err != nil {
		return err
	}
	if err := rt.checkRemote(rank, remote, size, op); err != nil {
		return err
	}
	if size > transport.MaxPayload {
		return fmt.Errorf("pgas: read: %d bytes above the %d-byte limit of one read: %w", size, transport.MaxPayload, ErrInvalid)
	}
	qu, err := rt.queue(q, op)
	if err != nil {
		return err
	}
	if err := qu.reserve(rt.cfg.QueueDepth, op); err != nil {
		return err
	}
	added := false
	defer func() {
		if !added {
			qu.release()
		}
	}()
	v, err := rt.current()
	if err != nil {
		return err
	}
	proc, err := rt.procOf(v, rank, op)
	if err != nil {
		return err
	}
	if proc == rt.self {
		src, err := rt.localRange(remote, size, op)
		if err != nil {
			return err
		}
		copy(dst, src)
		return nil
	}
	req := rt.newRequest(proc, rank, dst)
	h := transport.Header{Type: transport.FrameReadReq, Seg: uint16(remote.Seg), Off: uint64(remote.Off), A: uint64(size), Seq: req.id}
	if err := rt.send(ctx, proc, &h, nil); err != nil {
		rt.dropRequest(req)
		return rt.sendErr(ctx, err, rank, proc, op)
	}
	added = true
	qu.add(pendingOp{rank: rank, req: req, op: op})
	return nil
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

// Wait blocks until every operation posted on q since the last Wait is
// complete at its target (writes and notifications applied, reads landed).
// This is remote completion, stronger than GASPI's local completion: when
// Wait returns nil the data is in place. The queue is emptied whatever the
// outcome; the first error is returned (a *RankError for a failed peer).
func (rt *Runtime) Wait(ctx context.Context, q Queue) error {
	qu, err := rt.queue(q, "wait")
	if err != nil {
		return err
	}
	qu.mu.Lock()
	ops := qu.pending
	qu.pending = nil
	qu.mu.Unlock()
	var first error
	for i, op := range ops {
		var err error
		if op.req != nil {
			_, err = rt.waitRequest(ctx, op.req, op.rank, op.op)
		} else {
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
	return first
}

func (rt *Runtime) waitAck(ctx context.Context, op pendingOp) error {
	pr := op.peer
	requested := false
	for {
		pr.mu.Lock()
		if code, ok := pr.nacks[op.seq]; ok {
			delete(pr.nacks, op.seq)
			pr.mu.Unlock()
			return fmt.Errorf("pgas: %s: rank %d refused: %w: %w", op.op, op.rank, ErrRemote, errOf(code))
		}
		if pr.acked >= op.seq {
			pr.mu.Unlock()
			return nil
		}
		if pr.downErr != nil {
			err := pr.downErr
			pr.mu.Unlock()
			if err == ErrClosed {
				return ErrClosed
			}
			return &RankError{Rank: op.rank, Op: op.op, Err: err}
		}
		ch := pr.changed
		pr.mu.Unlock()
		if !requested {
			// Acks ride on frames going back; with none coming, ask.
			requested = true
			rt.requestAck(ctx, pr)
		}
		if err := rt.waitChan(ctx, ch, op.op); err != nil {
			return err
		}
	}
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
// call NotifyReset.
func (rt *Runtime) NotifyWaitSome(ctx context.Context, seg segments.ID, first segments.NotificationID, num int) (segments.NotificationID, error) {
	s, err := rt.localSeg(uint16(seg))
	if err != nil {
		return 0, err
	}
	id, err := s.WaitSome(ctx, first, num, segments.WaitPolicy{Spin: rt.cfg.SpinWait})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctxError(ctx, "notify_waitsome")
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

// SegmentCreate allocates segment id of size bytes on every rank of g. It
// is collective: each member calls it, and it returns once every member has
// created it, so writes may follow at once. Ranks may pass different sizes;
// each learns all of them, and remote bounds are checked before sending.
//
// After a recovery every rank calls it again: a survivor that already holds
// segment id with the same size keeps its memory and only rejoins the
// exchange of sizes, while a promoted spare allocates it. A different size
// for an existing ID is ErrSegmentExists.
func (rt *Runtime) SegmentCreate(ctx context.Context, id segments.ID, size int64, g *Group) (*segments.Segment, error) {
	if g == nil {
		g = rt.GroupAll()
	}
	rt.segMu.Lock()
	si := rt.segs[id]
	fresh := si == nil
	if !fresh && si.seg.Size() != size {
		rt.segMu.Unlock()
		return nil, fmt.Errorf("pgas: segment_create: segment %d exists with %d bytes, asked for %d: %w", id, si.seg.Size(), size, ErrSegmentExists)
	}
	if fresh {
		seg, err := segments.New(id, size, segments.Options{})
		if err != nil {
			rt.segMu.Unlock()
			return nil, fmt.Errorf("pgas: segment_create: %w", err)
		}
		si = &segInfo{seg: seg}
		rt.segs[id] = si
	}
	rt.segMu.Unlock()
	sizes, members, err := allgatherRanks(ctx, rt, g, []int64{size})
	if err != nil {
		if fresh {
			rt.SegmentDelete(id)
		}
		return nil, err
	}
	full := make([]int64, rt.Size())
	for i := range full {
		full[i] = -1
	}
	for i, r := range members {
		full[r] = sizes[i]
	}
	rt.segMu.Lock()
	si.sizes = full
	rt.segMu.Unlock()
	return si.seg, nil
}

// Segment returns local segment id.
func (rt *Runtime) Segment(id segments.ID) (*segments.Segment, error) {
	return rt.localSeg(uint16(id))
}

// SegmentDelete frees local segment id. Writes that arrive for it later are
// refused.
func (rt *Runtime) SegmentDelete(id segments.ID) error {
	rt.segMu.Lock()
	si := rt.segs[id]
	delete(rt.segs, id)
	rt.segMu.Unlock()
	if si == nil {
		return fmt.Errorf("pgas: segment_delete: segment %d: %w", id, ErrNoSegment)
	}
	// Wait for the handlers using its memory on behalf of peers.
	si.use.Lock()
	si.deleted = true
	si.use.Unlock()
	return si.seg.Close()
}

// request is an operation that waits for a response frame: a read or an
// atomic.
type request struct {
	id   uint64
	proc transport.Proc
	rank int
	dst  []byte // reads: where the data lands
	done chan struct{}
	val  uint64
	err  error
}

func (rt *Runtime) newRequest(proc transport.Proc, rank int, dst []byte) *request {
	r := &request{id: rt.nextReq.Add(1), proc: proc, rank: rank, dst: dst, done: make(chan struct{})}
	rt.reqMu.Lock()
	rt.reqs[r.id] = r
	rt.reqMu.Unlock()
	if rt.peers[proc].isDown() {
		rt.failRequests(func(x *request) bool { return x == r }, ErrRankFailed)
	}
	return r
}

func (rt *Runtime) dropRequest(r *request) {
	rt.reqMu.Lock()
	delete(rt.reqs, r.id)
	rt.reqMu.Unlock()
}

func (rt *Runtime) failRequests(match func(*request) bool, err error) {
	rt.reqMu.Lock()
	defer rt.reqMu.Unlock()
	for id, r := range rt.reqs {
		if match(r) {
			r.err = err
			close(r.done)
			delete(rt.reqs, id)
		}
	}
}

func (rt *Runtime) handleResponse(from transport.Proc, h *transport.Header, p transport.Payload) error {
	rt.reqMu.Lock()
	r := rt.reqs[h.Seq]
	if r != nil && r.proc == from {
		delete(rt.reqs, h.Seq)
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

func (rt *Runtime) waitRequest(ctx context.Context, r *request, rank int, op string) (uint64, error) {
	if err := rt.waitChan(ctx, r.done, op); err != nil {
		rt.dropRequest(r)
		return 0, err
	}
	switch {
	case r.err == nil:
		return r.val, nil
	case r.err == ErrClosed:
		return 0, ErrClosed
	case isRankFailed(r.err):
		return 0, &RankError{Rank: rank, Op: op, Err: r.err}
	}
	return 0, fmt.Errorf("pgas: %s: rank %d: %w", op, rank, r.err)
}
