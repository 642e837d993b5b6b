package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// conn is the one authenticated connection to a peer.
type conn struct {
	t      *Transport
	peer   *peer
	nc     net.Conn
	remote string
	fr     *frameReader
	dialed bool // this process dialed it (else the peer did)

	// wsem is the write token (capacity 1): its holder writes one whole
	// frame. A channel rather than a mutex so that waiting for it honours
	// ctx. The fields below belong to the holder.
	wsem      chan struct{}
	hdr       [transport.HeaderSize]byte
	iov       [3][]byte
	bufs      net.Buffers
	wdeadline time.Time     // the write deadline set on nc (zero, or aLongTimeAgo after a ctx ended)
	sock      *tlsSocket    // under nc when it is TLS (Config.TLS), else nil
	scratch   []byte        // a small frame in one piece, for one TLS record
	now       *socketWriter // non-blocking writes of small frames (writeNow); nil without a raw socket
	nowShort  atomic.Int64  // writeNow calls that left bytes to the writer (the socket was full)
	wbuf      []byte        // the batch being written; swapped with batch

	// The batch (Config.BatchFrame): small frames queued by Send, encoded,
	// in Send order, under bmu (a leaf). Whoever holds the write token
	// takes the whole batch and writes it before its own frame, so frames
	// leave in the order their Sends queued or wrote them.
	bmu          sync.Mutex
	batch        []byte
	batchFrames  int
	batchPayload int
	kick         chan struct{} // capacity 1: the batch holds a frame that must leave now
	kicked       bool          // under bmu: kick was sent since the writer last took the batch
	lingering    bool          // under bmu: lingerTimer is set (a SendLater frame waits)
	lingerTimer  *time.Timer   // kicks the writer Config.Linger after a SendLater frame
	dead         chan struct{} // closed when the reader ends: the connection is gone
	batchShut    bool          // under bmu: closed for idleness, nothing more is batched

	// The close for idleness (idle.go).
	active     atomic.Bool   // a frame went or came since the idle sweep last looked
	quietLooks int           // sweeps in a row that found it inactive; under t.mu
	retiring   bool          // held by the write token's holder: nothing more is written
	byeSeen    bool          // the peer's linkBye was read; under t.mu
	ackSeen    bool          // the peer's linkByeAck was read; the reader's
	links      chan uint64   // link frames for the link worker; made by the reader
	linksDone  chan struct{} // closed when the link worker ends
	halfClosed bool          // the link worker's
	retired    chan struct{} // closed when the peer leaves this connection for the next (conn.leave)
}

// touch records a frame going or coming, for the idle sweep.
func (c *conn) touch() {
	if !c.active.Load() {
		c.active.Store(true)
	}
}

// aLongTimeAgo is a deadline in the past: setting it unblocks a write.
var aLongTimeAgo = time.Unix(1, 0)

func (t *Transport) newConn(p *peer, nc net.Conn, remote string) *conn {
	br := bufio.NewReaderSize(newSocketReader(nc, time.Duration(t.spin.Load())), t.cfg.ReadBufferSize)
	c := &conn{
		t:       t,
		peer:    p,
		nc:      nc,
		remote:  remote,
		wsem:    make(chan struct{}, 1),
		sock:    tlsSocketOf(nc),
		kick:    make(chan struct{}, 1),
		dead:    make(chan struct{}),
		retired: make(chan struct{}),
	}
	c.fr = newFrameReader(br, p.id, &t.stats, c.onLink, c.touch)
	if t.cfg.BatchFrame > 0 {
		c.now = newSocketWriter(nc)
	}
	return c
}

// writeLoop is the connection's writer: each time the batch becomes
// non-empty it takes the write token and puts the whole batch on the wire
// with one write. It ends with the connection or at Close.
func (c *conn) writeLoop() {
	t := c.t
	for {
		select {
		case <-c.kick:
		case <-c.dead:
			return
		case <-t.closing:
			return
		}
		select {
		case c.wsem <- struct{}{}:
		case <-c.dead:
			return
		case <-t.closing:
			return
		}
		if err := c.writeBatch(); err != nil {
			<-c.wsem
			if !t.isClosed() {
				c.fail(fmt.Errorf("tcp: write to peer %d (%s): %w", c.peer.id, c.remote, err))
			}
			return
		}
		<-c.wsem
	}
}

// writeBatch writes the whole batch. The write token is held.
func (c *conn) writeBatch() error {
	b, frames, payload := c.takeBatch()
	if len(b) == 0 {
		return nil
	}
	if err := c.writeRaw(b); err != nil {
		return err
	}
	c.t.stats.framesOut.Add(uint64(frames))
	c.t.stats.bytesOut.Add(uint64(payload))
	return nil
}

// writeRaw writes b, whole frames, with no deadline. The write token is
// held.
func (c *conn) writeRaw(b []byte) error {
	if !c.wdeadline.IsZero() {
		c.resetWriteDeadline()
	}
	var err error
	if c.sock != nil {
		_, err = c.writeTLS(b)
	} else {
		_, err = c.nc.Write(b)
	}
	return err
}

// flushOnClose writes what is batched before Close cuts the connection,
// bounded by deadline: a frame whose Send returned before Close still
// leaves, as it would have had Send written it itself.
func (c *conn) flushOnClose(deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case c.wsem <- struct{}{}:
	case <-c.dead:
		return
	case <-timer.C:
		return
	}
	defer func() { <-c.wsem }()
	c.bmu.Lock()
	empty := len(c.batch) == 0
	c.bmu.Unlock()
	if empty {
		return
	}
	_ = c.nc.SetWriteDeadline(deadline)
	c.wdeadline = deadline
	_ = c.writeBatch()
}

// upLocked makes nc the connection to p; dialed says that this process
// dialed it. t.mu is held and p is idle.
func (t *Transport) upLocked(p *peer, nc net.Conn, dialed bool) *conn {
	c := t.newConn(p, nc, nc.RemoteAddr().String())
	c.dialed = dialed
	p.conn = c
	p.state = stateUp
	if dialed {
		// The dial loop ends here (it runs the reader); one still dialing
		// while the peer's dial came up ends at its next look, so that
		// a peer has one dial loop at a time, also once this connection
		// is closed for idleness and the peer idle again.
		p.dialing = false
	}
	close(p.ready)
	t.stats.connections.Add(1)
	if t.cfg.BatchFrame > 0 {
		t.wg.Add(1) // t.mu is held and t is not closed: Close has not begun waiting
		go func() {
			defer t.wg.Done()
			c.writeLoop()
		}()
	}
	t.log.Debug("tcp: connected", "peer", uint32(p.id), "remote", c.remote)
	return c
}

// send queues one small frame (Config.BatchFrame) or writes one frame,
// with the batch queued before it. See Transport.Send for the ctx rules.
// Its steps: queue a small frame; take the write token; clear a deadline
// an earlier Send left; write the batch and the frame, the ctx's end
// cutting the write short; then count the frames, or hand an unfinished
// frame to a background writer, or fail the connection.
func (c *conn) send(ctx context.Context, h *transport.Header, payload []byte, linger bool) error {
	t := c.t
	if transport.HeaderSize+len(payload) <= t.cfg.BatchFrame {
		if !linger || t.cfg.Linger == 0 {
			if done, err := c.writeNow(h, payload); done {
				return err
			}
		}
		if c.enqueue(h, payload, linger) {
			return nil
		}
	}
	select {
	case c.wsem <- struct{}{}:
	default:
		if err := c.waitToken(ctx); err != nil {
			return err
		}
	}
	detached := false // the token passed to a background writer
	defer func() {
		if !detached {
			<-c.wsem
		}
	}()
	if c.retiring {
		return errRetired
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tcp: send to peer %d: %w", c.peer.id, err)
	}
	c.touch()
	if !c.wdeadline.IsZero() {
		c.resetWriteDeadline() // a previous Send's ctx ended mid-write and left one
	}

	// The ctx's end (deadline or cancellation) sets a past write deadline,
	// which unblocks the write in progress.
	var stop func() bool
	var fired chan struct{}
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = c.nc.SetWriteDeadline(aLongTimeAgo)
			close(fired)
		})
	}

	h.Encode(c.hdr[:])
	pre, preFrames, prePayload := c.takeBatch()
	var n int64
	var err error
	if c.sock != nil {
		n, err = c.writeTLS(pre, c.hdr[:], payload)
	} else if len(pre) == 0 && len(payload) == 0 {
		var k int
		k, err = c.nc.Write(c.hdr[:])
		n = int64(k)
	} else {
		c.iov[0], c.iov[1], c.iov[2] = pre, c.hdr[:], payload
		c.bufs = c.iov[:]
		n, err = c.bufs.WriteTo(c.nc) // one writev, straight from payload
		c.iov[0], c.iov[2], c.bufs = nil, nil, nil
	}
	if n == 0 && err != nil {
		c.requeue(pre, preFrames, prePayload) // its Sends returned: it must still leave
		pre, preFrames, prePayload = nil, 0, 0
	}
	if stop != nil && !stop() {
		<-fired // the deadline is in the past now; the next send clears it
		c.wdeadline = aLongTimeAgo
	}
	frames, pl := 1+preFrames, len(payload)+prePayload
	if err == nil && c.sock != nil && c.sock.rest != nil {
		detached, err = c.finishTLSLater(ctx, frames, pl)
		return err
	}
	if err == nil {
		t.stats.framesOut.Add(uint64(frames))
		t.stats.bytesOut.Add(uint64(pl))
		return nil
	}
	detached, err = c.writeFailed(ctx, err, n, pre, payload, frames, pl)
	return err
}

// waitToken waits for the write token, which a write in progress holds,
// until ctx ends or the transport closes.
func (c *conn) waitToken(ctx context.Context) error {
	select {
	case c.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tcp: send to peer %d: waiting for the connection: %w", c.peer.id, ctx.Err())
	case <-c.t.closing:
		return transport.ErrClosed
	}
}

// resetWriteDeadline removes nc's write deadline (a ctx's end leaves one
// in the past). The write token is held.
func (c *conn) resetWriteDeadline() {
	_ = c.nc.SetWriteDeadline(time.Time{})
	c.wdeadline = time.Time{}
}

// finishTLSLater is send's end when, under TLS, the ctx ended mid-frame:
// the frame's records are complete in c.sock.rest, and a background
// writer puts them on the wire. detached says that the write token went
// with it.
func (c *conn) finishTLSLater(ctx context.Context, frames, payloadLen int) (detached bool, err error) {
	rest := c.sock.rest
	c.sock.rest = nil
	c.resetWriteDeadline()
	if !c.t.goTracked(func() { c.finishWrite(c.sock.Conn, rest, frames, payloadLen) }) {
		return false, transport.ErrClosed
	}
	ctxErr := sendCtxErr(ctx)
	c.t.log.Debug("tcp: send timed out mid-frame; finishing its TLS records in the background",
		"peer", uint32(c.peer.id), "unwritten", len(rest), "err", ctxErr)
	return true, fmt.Errorf("tcp: send to peer %d: %w (part of the frame was written; it is completed in the background)", c.peer.id, ctxErr)
}

// writeFailed is send's end when the write of pre (the batch), the header
// and payload failed after n bytes: the transport closed; the ctx ended,
// with nothing written or with the rest of the frame handed to a
// background writer (detached: the write token went with it); or the
// connection failed.
func (c *conn) writeFailed(ctx context.Context, err error, n int64, pre, payload []byte, frames, payloadLen int) (detached bool, _ error) {
	t := c.t
	if t.isClosed() {
		return false, transport.ErrClosed
	}
	if c.sock != nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, &PeerDownError{Peer: c.peer.id, Err: c.fail(fmt.Errorf("tcp: write to peer %d (%s): %w", c.peer.id, c.remote, err))}
	}
	ctxErr := sendCtxErr(ctx)
	if n == 0 {
		return false, fmt.Errorf("tcp: send to peer %d: nothing written: %w", c.peer.id, ctxErr)
	}
	// Part of the frame is on the wire. Cutting the stream here would turn
	// a timeout into a death, so the rest is copied (the caller gets its
	// slice back now) and written in the background; the write token
	// stays held until then.
	total := int64(len(pre) + transport.HeaderSize + len(payload))
	rest := unwritten(n, pre, c.hdr[:], payload)
	c.resetWriteDeadline()
	if !t.goTracked(func() { c.finishWrite(c.nc, rest, frames, payloadLen) }) {
		return false, transport.ErrClosed
	}
	t.log.Debug("tcp: send timed out mid-frame; finishing it in the background",
		"peer", uint32(c.peer.id), "written", n, "total", total, "err", ctxErr)
	return true, fmt.Errorf("tcp: send to peer %d: %w (%d of %d bytes were written; the frame is completed in the background)",
		c.peer.id, ctxErr, n, total)
}

// sendCtxErr is the error of the ctx whose end cut a write short.
func sendCtxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded // only the AfterFunc sets deadlines; not expected
}

// unwritten copies what is left of parts after their first n bytes were
// written.
func unwritten(n int64, parts ...[]byte) []byte {
	var total int64
	for _, p := range parts {
		total += int64(len(p))
	}
	rest := make([]byte, 0, total-n)
	for _, p := range parts {
		if n >= int64(len(p)) {
			n -= int64(len(p))
			continue
		}
		rest = append(rest, p[n:]...)
		n = 0
	}
	return rest
}

// finishWrite writes the tail of frames whose Send timed out to w (the
// connection, or the socket under TLS), then hands the write token back.
func (c *conn) finishWrite(w io.Writer, rest []byte, frames, payloadLen int) {
	defer func() { <-c.wsem }()
	if _, err := w.Write(rest); err != nil {
		if !c.t.isClosed() {
			c.fail(fmt.Errorf("tcp: write to peer %d (%s): %w", c.peer.id, c.remote, err))
		}
		return
	}
	c.t.stats.framesOut.Add(uint64(frames))
	c.t.stats.bytesOut.Add(uint64(payloadLen))
}

// fail marks the peer down with cause, unless it already is, and closes the
// socket. The connection's reader then reports PeerDown. It returns the
// cause that stuck.
func (c *conn) fail(cause error) error {
	t := c.t
	t.mu.Lock()
	p := c.peer
	t.downLocked(c, cause)
	if p.err != nil {
		cause = p.err
	}
	t.mu.Unlock()
	_ = c.nc.Close()
	return cause
}

// downLocked marks c's peer down with cause if c is its live connection.
// t.mu is held.
func (t *Transport) downLocked(c *conn, cause error) {
	if p := c.peer; (p.state == stateUp || p.state == stateClosing) && p.conn == c {
		p.state = stateDown
		p.err = cause
		t.stats.connections.Add(-1)
	}
}

// readLoop delivers c's frames until the connection fails or Close, then
// reports PeerDown once.
func (c *conn) readLoop() {
	t := c.t
	defer close(c.dead)
	select {
	case <-t.started:
	case <-t.closing:
		t.closeSocket(c.nc)
		return
	}
	id := c.peer.id
	err := c.fr.run(t.handler, func(h *transport.Header, err error) {
		t.log.Debug("tcp: handler rejected a frame", "peer", uint32(id), "type", h.Type, "seq", h.Seq, "err", err)
	})
	c.endLinks()
	t.closeSocket(c.nc)

	var cause error
	switch {
	case errors.Is(err, transport.ErrBadFrame):
		cause = fmt.Errorf("tcp: peer %d (%s) sent a malformed frame: %w", id, c.remote, err)
		if !t.isClosed() {
			t.log.Warn("tcp: bad frame; closing the connection", "peer", uint32(id), "remote", c.remote, "err", err)
		}
	case err == io.EOF:
		cause = fmt.Errorf("tcp: peer %d (%s) closed the connection: %w", id, c.remote, err)
	default:
		cause = fmt.Errorf("tcp: read from peer %d (%s): %w", id, c.remote, err)
	}

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	p := c.peer
	t.downLocked(c, cause)
	deliver := p.state == stateDown && p.conn == c && !p.notified
	if deliver {
		p.notified = true
		cause = p.err
	}
	h := t.handler
	t.mu.Unlock()
	if deliver {
		t.stats.peersDown.Add(1)
		t.log.Info("tcp: peer down", "peer", uint32(id), "remote", c.remote, "err", cause)
		h.PeerDown(id, cause)
	}
}
