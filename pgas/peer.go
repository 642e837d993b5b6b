package pgas

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// peer is the per-process state of the one-sided protocol.
type peer struct {
	proc transport.Proc

	// sendMu serialises frames that carry a sequence number, so that
	// sequence order is wire order and one cumulative ack covers a prefix.
	sendMu  sync.Mutex
	nextSeq atomic.Uint64    // the last sequence number sent; added to under sendMu
	sendHdr transport.Header // postFrame's header, under sendMu: a frame allocates nothing

	mu      sync.Mutex
	sent    ackOut        // what the peer acknowledged and refused
	settled atomic.Uint64 // the highest sequence whose outcome is known (applied or refused), for quiet to read without mu
	downErr error         // set once the connection is lost
	changed chan struct{} // closed and replaced when sent or downErr changes
	down    chan struct{} // closed when downErr is set

	// landing is 1 + the epoch of the frame from this peer being applied
	// now (admitted, its payload maybe still arriving), 0 when none. Only
	// the peer's reader goroutine writes it; Recover waits until no frame
	// of an older epoch is landing before it lets the program go on.
	landing atomic.Uint64

	ackMu   sync.Mutex
	recv    ackIn      // what this process applied from the peer and owes it; under ackMu
	flushMu sync.Mutex // held by whoever sends acks to this peer (flushAcks)

	out outbox // replies to this peer, sent by a goroutine of their own

	departed   atomic.Bool // the peer said goodbye: its connection closing is no failure
	toldFenced atomic.Bool // this peer, declared failed, was told it is fenced

	lostNanos atomic.Int64 // when its connection was lost (Unix ns), 0 before

	downFlag atomic.Bool // downErr is set: for the operations done in memory, which take no lock of the peer

	reqsOut atomic.Int32 // requests (reads, atomics) to the peer not answered yet; under the runtime's reqMu
}

// quiet reports whether nothing this process sent the peer is still on
// its way: every sequenced frame acknowledged or refused (a refused frame
// lands nothing later), every request answered. An
// operation done directly in the peer's memory (postDirect) keeps its
// order with the frames the same goroutine sent before it only then.
// (Operations of different goroutines have no order to keep.)
func (pr *peer) quiet() bool {
	return pr.reqsOut.Load() == 0 && pr.settled.Load() >= pr.nextSeq.Load()
}

// Goodbyes are bounded by goodbyeTimeout: a base for the round trip, and
// a little per peer, because on a busy host a process that says goodbye
// to hundreds of peers, each leaving at the same time, gets the CPU for
// only part of that time. A goodbye that is not acknowledged in time
// may be lost when the transport closes: the peer then takes the closed
// connection for a failure, which the membership sorts out (Finalize
// waits for its verdict), so the bound trades accuracy, never safety.
const (
	goodbyeBase    = 100 * time.Millisecond
	goodbyePerPeer = 2 * time.Millisecond
	goodbyeMax     = time.Second
)

func goodbyeTimeout(peers int) time.Duration {
	return min(goodbyeBase+time.Duration(peers)*goodbyePerPeer, goodbyeMax)
}

// sayGoodbye tells every live peer this process talked to (and, over a
// transport that is not a Connector, every idle spare), briefly, that
// this process is leaving on purpose, so that its connections closing is
// not taken for a failure. Over a transport that connects on first use
// (Connector), only the peers connected now hear it: the others have no
// connection to see closing, and dialing every process of the job at the
// end would cost what lazy connections save. So a goodbye costs
// O(partners) messages, not N - 1. An idle spare learns that the job
// ended from the membership (Finalize records it before any rank leaves);
// spareSeesEnd, which needs a goodbye from every rank's process, is the
// fallback where ranks did talk to it. The goodbye is sequenced and
// acknowledged: a transport may drop frames still in flight when it
// closes. It returns within goodbyeTimeout even when a send holds a
// peer's locks: the goodbyes still under way then end with the transport.
func (rt *Runtime) sayGoodbye() {
	if rt.halted() != nil {
		return
	}
	v := rt.view.Load()
	conn, lazy := rt.tr.(Connector)
	if !lazy {
		for _, s := range v.spares {
			rt.peers.get(s) // the idle spares hear it too (spareSeesEnd)
		}
	}
	var live []*peer
	rt.peers.each(func(p *peer) {
		// isFailed: a peer allocated since v was loaded may be of a
		// process that joined in a newer, larger view.
		if p.proc != rt.self && !p.isDown() && !v.isFailed(p.proc) && (!lazy || conn.Connected(p.proc)) {
			live = append(live, p)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), goodbyeTimeout(len(live)))
	defer cancel()
	done := make(chan struct{})
	rt.goFunc(func() {
		defer close(done)
		rt.goodbyes(ctx, live)
	})
	select {
	case <-done:
	case <-ctx.Done():
		rt.log.Debug("goodbyes not all acknowledged in time", "peers", len(live), "bound", goodbyeTimeout(len(live)))
	}
}

func (rt *Runtime) goodbyes(ctx context.Context, live []*peer) {
	var sent []pendingOp
	for _, p := range live {
		// Acks of what this process applied go first: the peer may wait
		// for them, and the outbox is abandoned once Close goes on.
		rt.flushAcks(ctx, p)
		h := transport.Header{Type: transport.FrameControl, Flags: transport.FlagAck, A: ctlGoodbye}
		p.sendMu.Lock()
		h.Seq = p.nextSeq.Add(1)
		err := rt.send(ctx, p.proc, &h, nil)
		p.sendMu.Unlock()
		if err == nil {
			sent = append(sent, pendingOp{rank: -1, peer: p, seq: h.Seq, op: "goodbye"})
		}
	}
	for _, op := range sent {
		rt.waitAck(ctx, op) // best effort: a peer that does not answer is left
	}
}

func newPeer(p transport.Proc) *peer {
	return &peer{proc: p, changed: make(chan struct{}), down: make(chan struct{})}
}

func (p *peer) isDown() bool {
	select {
	case <-p.down:
		return true
	default:
		return false
	}
}

func (p *peer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.downErr != nil {
		return
	}
	p.downErr = err
	p.downFlag.Store(true)
	close(p.down)
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *peer) ack(seq uint64) {
	p.mu.Lock()
	if p.sent.ack(seq) {
		p.settled.Store(max(p.settled.Load(), p.sent.acked))
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *peer) nack(seq, code uint64) {
	p.mu.Lock()
	p.sent.nack(seq, code)
	p.settled.Store(max(p.settled.Load(), p.sent.acked, seq))
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// applied records that a sequenced frame from a peer was applied (or
// refused with err) and schedules the acknowledgement. Refusals are queued
// in the same state as the cumulative ack and flushed before it, so the
// sender always learns of a refused sequence before any ack that covers it.
func (rt *Runtime) applied(from transport.Proc, h *transport.Header, err error) {
	if rt.recordApplied(from, h, err) {
		rt.enqueue(from, outJob{ack: true})
	}
}

// recordApplied is applied without scheduling: it reports whether an ack
// job must be queued.
func (rt *Runtime) recordApplied(from transport.Proc, h *transport.Header, err error) bool {
	if err == nil && h.Epoch < rt.appEpoch.Load() {
		rt.stats.StaleApplied.Add(1)
		rt.log.Error("applied a frame from a stale epoch", "from", uint32(from), "type", h.Type,
			"frame_epoch", h.Epoch, "program_epoch", rt.appEpoch.Load())
	}
	if h.Flags&transport.FlagAck == 0 {
		return false
	}
	pr := rt.peers.get(from)
	pr.ackMu.Lock()
	defer pr.ackMu.Unlock()
	if err == nil {
		pr.recv.apply(h.Seq)
		return false
	}
	// A refusal goes out at once, ahead of any ack that covers it.
	return pr.recv.refuse(h.Seq, codeOf(err))
}

// requestedAck handles a sender's request (it waits in Wait): answer with
// the cumulative ack even if one was already carried by a frame, since
// that frame may have been cut.
func (rt *Runtime) requestedAck(from transport.Proc) {
	pr := rt.peers.get(from)
	pr.ackMu.Lock()
	start := pr.recv.request()
	pr.ackMu.Unlock()
	if start && !rt.ackNow(pr) {
		rt.enqueue(from, outJob{ack: true})
	}
}

// ackNow sends the cumulative ack owed to pr from the reader goroutine,
// through a transport that can queue without blocking (Queuer), and
// reports whether it did. It does not when a refusal is owed (refusals
// go first, from the outbox), when another flush is running, or when the
// transport cannot queue; the caller then schedules the outbox's flush.
func (rt *Runtime) ackNow(pr *peer) bool {
	q, ok := rt.tr.(Queuer)
	if !ok || !pr.flushMu.TryLock() {
		return false
	}
	defer pr.flushMu.Unlock()
	pr.ackMu.Lock()
	defer pr.ackMu.Unlock()
	if len(pr.recv.nacksOut) != 0 || pr.recv.sending != 0 {
		return false
	}
	f := pr.recv.take()
	if f.ack == 0 {
		return true
	}
	h := transport.Header{Type: transport.FrameAck, Seq: f.ack, Epoch: rt.view.Load().epoch}
	if q.Queue(pr.proc, &h, nil) {
		return true
	}
	pr.recv.force = true // undo take: the outbox's flush sends it
	pr.recv.mark()
	return false
}

// stampAck puts the cumulative ack of what this process applied from p on
// a frame going to p, unless a refusal for p is still unsent: an ack must
// never reach the sender ahead of the refusal of a sequence it covers.
func (rt *Runtime) stampAck(p transport.Proc, h *transport.Header) {
	if h.Type == transport.FrameAck || !rt.peers.has(p) {
		return
	}
	pr := rt.peers.get(p)
	pr.ackMu.Lock()
	if ack := pr.recv.piggyback(); ack != 0 {
		h.Ack = ack
	}
	pr.ackMu.Unlock()
}

// requestAck asks p for its cumulative ack: sent by a waiter whose
// operations are not acknowledged yet. It follows them on the wire, so the
// answer covers them.
func (rt *Runtime) requestAck(ctx context.Context, pr *peer) {
	h := transport.Header{Type: transport.FrameAck, Flags: transport.FlagAck}
	rt.send(ctx, pr.proc, &h, nil)
}

func (rt *Runtime) queueNack(from transport.Proc, seq, code uint64) {
	h := transport.Header{Type: transport.FrameWrite, Flags: transport.FlagAck, Seq: seq}
	rt.applied(from, &h, errOf(code))
}

func (rt *Runtime) waitAck(ctx context.Context, op pendingOp) error {
	pr := op.peer
	requested := false
	for {
		pr.mu.Lock()
		refused, code, applied := pr.sent.outcome(op.seq)
		if refused {
			pr.mu.Unlock()
			return fmt.Errorf("pgas: %s: rank %d refused: %w: %w", op.op, op.rank, ErrRemote, errOf(code))
		}
		if applied {
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
