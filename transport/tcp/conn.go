package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// conn is the one authenticated connection to a peer.
type conn struct {
	t      *Transport
	peer   *peer
	nc     net.Conn
	remote string
	fr     *frameReader

	// wsem is the write token (capacity 1): its holder writes one whole
	// frame. A channel rather than a mutex so that waiting for it honours
	// ctx. The fields below belong to the holder.
	wsem      chan struct{}
	hdr       [transport.HeaderSize]byte
	iov       [3][]byte
	bufs      net.Buffers
	wdeadline time.Time  // the write deadline set on nc (zero, or aLongTimeAgo after a ctx ended)
	sock      *tlsSocket // under nc when it is TLS (Config.TLS), else nil
	scratch   []byte     // a small frame in one piece, for one TLS record
	wbuf      []byte     // the batch being written; swapped with batch

	// The batch (Config.BatchFrame): small frames queued by Send, encoded,
	// in Send order, under bmu (a leaf). Whoever holds the write token
	// takes the whole batch and writes it before its own frame, so frames
	// leave in the order their Sends queued or wrote them.
	bmu          sync.Mutex
	batch        []byte
	batchFrames  int
	batchPayload int
	kick         chan struct{} // capacity 1: the batch became non-empty
	dead         chan struct{} // closed when the reader ends: the connection is gone
}

// aLongTimeAgo is a deadline in the past: setting it unblocks a write.
var aLongTimeAgo = time.Unix(1, 0)

func (t *Transport) newConn(p *peer, nc net.Conn, remote string) *conn {
	br := bufio.NewReaderSize(newSocketReader(nc, t.cfg.PollSpin), t.cfg.ReadBufferSize)
	return &conn{
		t:      t,
		peer:   p,
		nc:     nc,
		remote: remote,
		fr:     newFrameReader(br, p.id, &t.stats),
		wsem:   make(chan struct{}, 1),
		sock:   tlsSocketOf(nc),
		kick:   make(chan struct{}, 1),
		dead:   make(chan struct{}),
	}
}

// tlsSocketOf finds the tlsSocket under a data connection, or nil.
func tlsSocketOf(nc net.Conn) *tlsSocket {
	for {
		switch c := nc.(type) {
		case *tlsSocket:
			return c
		case *watchedConn:
			nc = c.Conn
		case auth.Conn:
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// maxCoalesce is the largest frame a TLS connection copies into one write
// (one TLS record): a separate record for the header would cost a second
// system call and 22 bytes of TLS overhead per frame.
const maxCoalesce = 16 << 10

// writeTLS writes parts (batched frames, a header, a payload) through
// TLS, armed: its records are batched, and a write cut off by the ctx's
// deadline leaves the rest of them in c.sock.rest.
func (c *conn) writeTLS(parts ...[]byte) (int64, error) {
	c.sock.armed = true
	defer func() { c.sock.armed = false }()
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	var n int64
	var err error
	if total <= maxCoalesce {
		c.scratch = c.scratch[:0]
		for _, p := range parts {
			c.scratch = append(c.scratch, p...)
		}
		var k int
		k, err = c.nc.Write(c.scratch)
		n = int64(k)
	} else {
		for _, p := range parts {
			if len(p) == 0 {
				continue
			}
			var k int
			k, err = c.nc.Write(p)
			n += int64(k)
			if err != nil {
				break
			}
		}
	}
	if ferr := c.sock.flush(); err == nil {
		err = ferr
	}
	return n, err
}

// enqueue adds a small frame to the batch and wakes the writer; false when
// the batch has no room for it (the caller writes it itself).
func (c *conn) enqueue(h *transport.Header, payload []byte) bool {
	size := transport.HeaderSize + len(payload)
	c.bmu.Lock()
	if len(c.batch)+size > c.t.cfg.BatchBytes {
		c.bmu.Unlock()
		return false
	}
	first := len(c.batch) == 0
	n := len(c.batch)
	c.batch = slices.Grow(c.batch, size)[:n+transport.HeaderSize]
	h.Encode(c.batch[n:])
	c.batch = append(c.batch, payload...)
	c.batchFrames++
	c.batchPayload += len(payload)
	c.bmu.Unlock()
	if first {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// takeBatch hands the batch to the holder of the write token, which
// writes it before anything else (or gives it back with requeue).
func (c *conn) takeBatch() (b []byte, frames, payload int) {
	c.bmu.Lock()
	b, frames, payload = c.batch, c.batchFrames, c.batchPayload
	c.batch, c.wbuf = c.wbuf[:0], b
	c.batchFrames, c.batchPayload = 0, 0
	c.bmu.Unlock()
	return b, frames, payload
}

// requeue puts back a batch of which nothing was written, ahead of what
// was queued since, and wakes the writer.
func (c *conn) requeue(b []byte, frames, payload int) {
	if len(b) == 0 {
		return
	}
	c.bmu.Lock()
	nb := make([]byte, 0, len(b)+len(c.batch))
	c.batch = append(append(nb, b...), c.batch...)
	c.batchFrames += frames
	c.batchPayload += payload
	c.bmu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
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
	if !c.wdeadline.IsZero() {
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.wdeadline = time.Time{}
	}
	var err error
	if c.sock != nil {
		_, err = c.writeTLS(b)
	} else {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		return err
	}
	c.t.stats.framesOut.Add(uint64(frames))
	c.t.stats.bytesOut.Add(uint64(payload))
	return nil
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

// upLocked makes nc the connection to p. t.mu is held and p is waiting.
func (t *Transport) upLocked(p *peer, nc net.Conn) *conn {
	c := t.newConn(p, nc, nc.RemoteAddr().String())
	p.conn = c
	p.state = stateUp
	close(p.ready)
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
func (c *conn) send(ctx context.Context, h *transport.Header, payload []byte) error {
	t := c.t
	if transport.HeaderSize+len(payload) <= t.cfg.BatchFrame && c.enqueue(h, payload) {
		return nil
	}
	select {
	case c.wsem <- struct{}{}:
	default:
		select {
		case c.wsem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("tcp: send to peer %d: waiting for the connection: %w", c.peer.id, ctx.Err())
		case <-t.closing:
			return transport.ErrClosed
		}
	}
	detached := false // the token passed to a background writer
	defer func() {
		if !detached {
			<-c.wsem
		}
	}()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tcp: send to peer %d: %w", c.peer.id, err)
	}

	if !c.wdeadline.IsZero() {
		// A previous Send's ctx ended mid-write and left a deadline.
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.wdeadline = time.Time{}
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
	total := int64(len(pre) + transport.HeaderSize + len(payload))
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
		total = int64(transport.HeaderSize + len(payload))
	}
	if stop != nil && !stop() {
		<-fired // the deadline is in the past now; the next send clears it
		c.wdeadline = aLongTimeAgo
	}
	if err == nil && c.sock != nil && c.sock.rest != nil {
		// TLS: the ctx ended mid-frame; the frame's records are complete
		// in rest, and a background writer puts them on the wire.
		rest := c.sock.rest
		c.sock.rest = nil
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.wdeadline = time.Time{}
		frames, pl := 1+preFrames, len(payload)+prePayload
		if !t.goTracked(func() { c.finishWrite(c.sock.Conn, rest, frames, pl) }) {
			return transport.ErrClosed
		}
		detached = true
		ctxErr := ctx.Err()
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded // only the AfterFunc sets deadlines; not expected
		}
		t.log.Debug("tcp: send timed out mid-frame; finishing its TLS records in the background",
			"peer", uint32(c.peer.id), "unwritten", len(rest), "err", ctxErr)
		return fmt.Errorf("tcp: send to peer %d: %w (part of the frame was written; it is completed in the background)", c.peer.id, ctxErr)
	}
	if err == nil {
		t.stats.framesOut.Add(uint64(1 + preFrames))
		t.stats.bytesOut.Add(uint64(len(payload) + prePayload))
		return nil
	}
	if t.isClosed() {
		return transport.ErrClosed
	}

	if c.sock == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		ctxErr := ctx.Err()
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded // only the AfterFunc sets deadlines; not expected
		}
		if n == 0 {
			return fmt.Errorf("tcp: send to peer %d: nothing written: %w", c.peer.id, ctxErr)
		}
		// Part of the frame is on the wire. Cutting the stream here would
		// turn a timeout into a death, so the rest is copied (the caller
		// gets its slice back now) and written in the background; the
		// write token stays held until then.
		rest := unwritten(n, pre, c.hdr[:], payload)
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.wdeadline = time.Time{}
		frames, pl := 1+preFrames, len(payload)+prePayload
		if !t.goTracked(func() { c.finishWrite(c.nc, rest, frames, pl) }) {
			return transport.ErrClosed
		}
		detached = true
		t.log.Debug("tcp: send timed out mid-frame; finishing it in the background",
			"peer", uint32(c.peer.id), "written", n, "total", total, "err", ctxErr)
		return fmt.Errorf("tcp: send to peer %d: %w (%d of %d bytes were written; the frame is completed in the background)",
			c.peer.id, ctxErr, n, total)
	}
	return &PeerDownError{Peer: c.peer.id, Err: c.fail(fmt.Errorf("tcp: write to peer %d (%s): %w", c.peer.id, c.remote, err))}
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
	if p.state == stateUp && p.conn == c {
		p.state = stateDown
		p.err = cause
	}
	if p.err != nil {
		cause = p.err
	}
	t.mu.Unlock()
	_ = c.nc.Close()
	return cause
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
	if p.state == stateUp && p.conn == c {
		p.state = stateDown
		p.err = cause
	}
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

// acceptLoop accepts connections until Close; each is authenticated in its
// own goroutine so that a silent client cannot stall the others. Every
// accepted connection enters the admission gate (internal/admit), which
// bounds the unauthenticated ones and sheds the oldest when full.
func (t *Transport) acceptLoop() {
	var pause time.Duration
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if t.isClosed() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				t.log.Error("tcp: listener closed under the transport; no more peers can connect", "err", err)
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t.log.Warn("tcp: accept failed", "err", err, "retry_in", pause)
			select {
			case <-t.closing:
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		if !t.track(nc) {
			_ = nc.Close()
			return
		}
		pend := t.door.Admit(nc)
		// This goroutine is counted in t.wg, so Close's Wait cannot have
		// returned: Add is safe here.
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serveIncoming(nc, pend)
		}()
	}
}

// serveIncoming authenticates an accepted connection and, if it is the
// first from a lower peer, runs its reader. A connection the gate sheds
// during the handshake is dropped quietly (the gate counts it).
func (t *Transport) serveIncoming(nc net.Conn, pend *admit.Pending) {
	remote := nc.RemoteAddr().String()
	t.tune(nc)
	_ = nc.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	wc := &watchedConn{Conn: nc}
	if t.cfg.TLS {
		wc.Conn = &tlsSocket{Conn: nc}
	}
	sc, id, err := auth.Serve(wc, t.cfg.Token, auth.PurposeData, uint32(t.self), auth.AcceptHooks{Hello: pend.Greeted, Admit: pend.Admit}, t.cfg.TLS)
	wc.sealed = true
	if err != nil {
		if pend.Done() {
			t.closeSocket(nc)
			return
		}
		if wc.read == 0 && wc.err != nil && !errors.Is(wc.err, os.ErrDeadlineExceeded) && !t.isClosed() {
			// Closed by the remote end before it sent a byte: a liveness
			// probe of watchLoop (or a port scan). Nothing to refuse.
			t.closeSocket(nc)
			t.stats.probes.Add(1)
			t.log.Debug("tcp: probe connection", "remote", remote)
			if t.hooks.onProbe != nil {
				t.hooks.onProbe(remote)
			}
			return
		}
		t.refuse(nc, remote, transport.NoProc, fmt.Errorf("%w: %w", transport.ErrAuth, err))
		return
	}
	t.door.Authenticated()
	_ = nc.SetDeadline(time.Time{})
	nc = t.retrack(nc, sc)
	from := transport.Proc(id)
	if from >= t.self {
		t.refuse(nc, remote, from, fmt.Errorf("proc %d dialed proc %d, but only the lower proc dials", from, t.self))
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.closeSocket(nc)
		return
	}
	p := t.peerLocked(from)
	if p.state != stateWaiting {
		what := "connected"
		if p.state == stateDown {
			what = "down (a Proc is never reused)"
		}
		t.mu.Unlock()
		t.refuse(nc, remote, from, fmt.Errorf("proc %d is already %s", from, what))
		return
	}
	c := t.upLocked(p, nc)
	t.mu.Unlock()
	c.readLoop()
}

// watchedConn records how a handshake went on an accepted connection. Once
// sealed (by the accepting goroutine, before the connection is shared) it
// only passes reads and writes through: under TLS it stays below the TLS
// layer.
type watchedConn struct {
	net.Conn
	sealed bool
	read   int   // bytes received
	err    error // first read or write error
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.sealed {
		return n, err
	}
	c.read += n
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && !c.sealed && c.err == nil {
		c.err = err
	}
	return n, err
}

// tlsSocket is the socket under a TLS data connection (Config.TLS). TLS
// writes a large frame as records of 16 KiB, one write each; while a Send
// is writing (armed), tlsSocket batches them (up to maxBatch) so that a
// frame costs few system calls, as a plain one does with writev. A TLS
// record that was cut off cannot be resumed either, so where a plain frame
// whose Send's ctx ended mid-write is finished in the background from its
// bytes, a TLS frame is finished from its records: a write that fails on
// the past deadline the ctx set keeps the unwritten rest of the batch, and
// the rest of the frame's records, in rest and reports them written; the
// Send then hands rest to a background writer (conn.finishWrite). The
// holder of the write token owns every field.
type tlsSocket struct {
	net.Conn
	armed bool
	out   []byte // records batched while armed, written by flush
	rest  []byte // records accepted but not yet on the wire; nil: none
}

// maxBatch bounds the records a tlsSocket batches before it writes them.
const maxBatch = 256 << 10

func (s *tlsSocket) Write(b []byte) (int, error) {
	switch {
	case s.rest != nil:
		s.rest = append(s.rest, b...)
		return len(b), nil
	case !s.armed:
		return s.Conn.Write(b) // the handshake, an alert
	}
	s.out = append(s.out, b...)
	if len(s.out) >= maxBatch {
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// flush writes the batched records. A write cut by the deadline of the
// Send's ctx moves what it did not write to rest.
func (s *tlsSocket) flush() error {
	if len(s.out) == 0 {
		return nil
	}
	n, err := s.Conn.Write(s.out)
	if err != nil && n < len(s.out) && errors.Is(err, os.ErrDeadlineExceeded) {
		s.rest = append(make([]byte, 0, 2*(len(s.out)-n)), s.out[n:]...)
		err = nil
	}
	s.out = s.out[:0]
	return err
}

// dialLoop connects to the higher peer p with exponential backoff, bounded
// by Close and DialMaxElapsed, then runs the connection's reader. A peer
// that cannot be reached is reported down.
func (t *Transport) dialLoop(p *peer) {
	t.mu.Lock()
	addr := p.addr
	t.mu.Unlock()
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.cfg.DialInitialInterval),
		backoff.WithMaxInterval(t.cfg.DialMaxInterval),
		backoff.WithMaxElapsedTime(t.cfg.DialMaxElapsed),
	)
	begin := time.Now()
	attempts := 0
	nc, err := backoff.RetryNotifyWithData(func() (net.Conn, error) {
		attempts++
		return t.dialOnce(p.id, addr)
	}, backoff.WithContext(b, t.ctx), func(err error, next time.Duration) {
		t.log.Debug("tcp: dial failed; retrying", "peer", uint32(p.id), "addr", addr,
			"attempt", attempts, "retry_in", next, "err", err)
	})
	if err != nil {
		t.giveUp(p, fmt.Errorf("tcp: dial peer %d at %s: gave up after %d attempts in %v: %w",
			p.id, addr, attempts, time.Since(begin).Round(time.Millisecond), err))
		return
	}
	t.mu.Lock()
	if t.closed || p.state != stateWaiting {
		// Close won the race (or, impossibly, the peer came up another way).
		t.mu.Unlock()
		t.closeSocket(nc)
		return
	}
	c := t.upLocked(p, nc)
	t.mu.Unlock()
	c.readLoop()
}

// giveUp declares the peer p, which never connected, down with cause.
func (t *Transport) giveUp(p *peer, cause error) {
	t.mu.Lock()
	if t.closed || p.state != stateWaiting {
		t.mu.Unlock()
		return
	}
	p.state = stateDown
	p.err = cause
	p.notified = true
	close(p.ready)
	h, addr := t.handler, p.addr
	t.mu.Unlock()
	t.stats.peersDown.Add(1)
	t.log.Info("tcp: peer down", "peer", uint32(p.id), "remote", addr, "err", cause)
	h.PeerDown(p.id, cause)
}

// probeRefusals is how many refused connects in a row show that nothing
// listens at a lower peer's address any more.
const probeRefusals = 3

// watchLoop runs on the higher side while a Send waits for the lower peer p
// to dial. A lower peer that dies before it connects would otherwise leave
// the waiters hanging until their ctx ends, so the peer's listener is probed
// with plain TCP connects (closed at once, without a byte sent), on the dial
// backoff schedule: probeRefusals refusals in a row mean its process is gone
// and the peer is declared down. It stops when p connects or goes down, or
// at Close.
func (t *Transport) watchLoop(p *peer) {
	t.mu.Lock()
	addr, ready := p.addr, p.ready
	t.mu.Unlock()
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.cfg.DialInitialInterval),
		backoff.WithMaxInterval(t.cfg.DialMaxInterval),
		backoff.WithMaxElapsedTime(0), // until p connects or Close
	)
	timer := time.NewTimer(b.NextBackOff())
	defer timer.Stop()
	refused := 0
	for {
		select {
		case <-ready:
			return
		case <-t.closing:
			return
		case <-timer.C:
		}
		d := net.Dialer{Timeout: t.cfg.DialTimeout}
		nc, err := d.DialContext(t.ctx, "tcp", addr)
		switch {
		case err == nil:
			_ = nc.Close()
			refused = 0
		case errors.Is(err, syscall.ECONNREFUSED):
			refused++
		}
		if refused >= probeRefusals {
			t.giveUp(p, fmt.Errorf("tcp: peer %d never connected and nothing listens at %s any more: %w", p.id, addr, err))
			return
		}
		timer.Reset(b.NextBackOff())
	}
}

// dialOnce makes one authenticated connection to peer id at addr.
func (t *Transport) dialOnce(id transport.Proc, addr string) (net.Conn, error) {
	t.stats.dialAttempts.Add(1)
	d := net.Dialer{Timeout: t.cfg.DialTimeout, KeepAlive: t.cfg.KeepAlive}
	nc, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		if t.ctx.Err() != nil {
			return nil, backoff.Permanent(transport.ErrClosed)
		}
		return nil, err
	}
	if t.cfg.WrapConn != nil {
		nc = t.cfg.WrapConn(nc)
	}
	if !t.track(nc) {
		_ = nc.Close()
		return nil, backoff.Permanent(transport.ErrClosed)
	}
	t.tune(nc)
	remote := nc.RemoteAddr().String()
	_ = nc.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var hc net.Conn = nc
	if t.cfg.TLS {
		hc = &tlsSocket{Conn: nc}
	}
	sc, got, err := auth.Dial(hc, t.cfg.Token, auth.PurposeData, uint32(t.self), t.cfg.TLS)
	if err != nil {
		err = fmt.Errorf("%w: %w", transport.ErrAuth, err)
	} else if transport.Proc(got) != id {
		err = fmt.Errorf("%w: %s answered as proc %d, want %d", transport.ErrAuth, addr, got, id)
	}
	if err != nil {
		t.refuse(nc, remote, id, err)
		if t.isClosed() {
			return nil, backoff.Permanent(transport.ErrClosed)
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return t.retrack(nc, sc), nil
}

// refuse closes a connection that failed authentication or broke the
// connection rules, and counts and logs it (within the admission gate's
// log bounds: a flood costs a few lines per interval). It never produces
// PeerDown.
func (t *Transport) refuse(nc net.Conn, remote string, claimed transport.Proc, err error) {
	t.closeSocket(nc)
	if t.isClosed() {
		return // the handshake was cut by Close
	}
	t.stats.handshakesRefused.Add(1)
	var attrs []any
	if claimed != transport.NoProc {
		attrs = append(attrs, "peer", uint32(claimed))
	}
	t.door.Refuse(remote, err, attrs...)
	if t.hooks.onRefuse != nil {
		t.hooks.onRefuse(remote, err)
	}
}

// tune applies the socket options of the Config.
func (t *Transport) tune(nc net.Conn) {
	if w, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = w.NetConn()
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if t.cfg.SocketReadBuffer > 0 {
		_ = tc.SetReadBuffer(t.cfg.SocketReadBuffer)
	}
	if t.cfg.SocketWriteBuffer > 0 {
		_ = tc.SetWriteBuffer(t.cfg.SocketWriteBuffer)
	}
	switch {
	case t.cfg.KeepAlive < 0:
		_ = tc.SetKeepAlive(false)
	case t.cfg.KeepAlive > 0:
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(t.cfg.KeepAlive)
	}
}

// goTracked runs f in a goroutine that Close waits for; false after Close.
func (t *Transport) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}
