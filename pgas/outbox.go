package pgas

import (
	"context"
	"sync"

	"github.com/gaspigo/gaspigo/transport"
)

// outJob is one reply queued for a peer.
type outJob struct {
	ack     bool // send the peer's latest applied sequence
	h       transport.Header
	payload []byte
	done    func() // called once the job is sent or dropped (unpins a read reply's segment)
}

// outbox is an unbounded FIFO of replies with at most one goroutine
// draining it. Unbounded, because a bounded one could make reader goroutines
// on two processes wait on each other.
type outbox struct {
	mu      sync.Mutex
	jobs    []outJob
	running bool
}

func (rt *Runtime) reply(to transport.Proc, h transport.Header, payload []byte) {
	rt.enqueue(to, outJob{h: h, payload: payload})
}

func (rt *Runtime) enqueue(to transport.Proc, j outJob) {
	pr := rt.peers.get(to)
	ob := &pr.out
	ob.mu.Lock()
	ob.jobs = append(ob.jobs, j)
	start := !ob.running
	ob.running = true
	ob.mu.Unlock()
	if start {
		if rt.isClosed() {
			return
		}
		rt.goFunc(func() { rt.drain(pr) })
	}
}

func (rt *Runtime) drain(pr *peer) {
	ob := &pr.out
	ctx := context.Background()
	for {
		ob.mu.Lock()
		if len(ob.jobs) == 0 || rt.isClosed() {
			for _, j := range ob.jobs {
				if j.done != nil {
					j.done()
				}
			}
			ob.jobs = nil
			ob.running = false
			ob.mu.Unlock()
			return
		}
		j := ob.jobs[0]
		ob.jobs[0] = outJob{}
		ob.jobs = ob.jobs[1:]
		ob.mu.Unlock()
		if j.ack {
			rt.flushAcks(ctx, pr)
			continue
		}
		h := j.h
		if err := rt.send(ctx, pr.proc, &h, j.payload); err != nil {
			rt.log.Debug("reply dropped", "peer_proc", int(pr.proc), "err", err)
		}
		if j.done != nil {
			j.done()
		}
	}
}

// flushAcks sends the refusals queued for pr, then one cumulative ack.
func (rt *Runtime) flushAcks(ctx context.Context, pr *peer) {
	// One flusher at a time, so that a refusal is never overtaken by an
	// ack covering it from another flusher (Close's and the outbox's).
	pr.flushMu.Lock()
	defer pr.flushMu.Unlock()
	pr.ackMu.Lock()
	f := pr.recv.take() // no piggybacked ack until its refusals are out
	pr.ackMu.Unlock()
	defer func() {
		pr.ackMu.Lock()
		pr.recv.sent(len(f.nacks))
		pr.ackMu.Unlock()
	}()
	for _, n := range f.nacks {
		h := transport.Header{Type: transport.FrameAck, Seq: n.seq, A: n.code}
		if err := rt.send(ctx, pr.proc, &h, nil); err != nil {
			return
		}
	}
	if f.ack != 0 {
		h := transport.Header{Type: transport.FrameAck, Seq: f.ack}
		rt.send(ctx, pr.proc, &h, nil)
	}
}
