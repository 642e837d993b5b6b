package pgas

import (
	"context"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

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
	qu, _, proc, err := rt.reserve(q, rank, op)
	if err != nil {
		return err
	}
	added := false
	defer func() {
		if !added {
			qu.release()
		}
	}()
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
	rt.peers.get(proc).reqsOut.Add(1)
	rt.reqMu.Unlock()
	if rt.peers.isDown(proc) {
		rt.failRequests(func(x *request) bool { return x == r }, ErrRankFailed)
	}
	return r
}

func (rt *Runtime) dropRequest(r *request) {
	rt.reqMu.Lock()
	if rt.reqs[r.id] == r {
		delete(rt.reqs, r.id)
		rt.peers.get(r.proc).reqsOut.Add(-1)
	}
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
			rt.peers.get(r.proc).reqsOut.Add(-1)
		}
	}
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
