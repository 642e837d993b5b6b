package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Idle connections (Config.IdleTimeout; see the package doc): a
// connection that carried no frame either way for IdleTimeout is closed
// by a handshake of two FrameLink frames, so that neither end takes it
// for a failure and no frame is lost, reordered or delivered twice:
//
//   - The closer takes the write token, stops the batch, writes what was
//     batched, then linkBye, and from then on writes nothing more on the
//     connection: a Send that got the connection before finds it retiring
//     once it holds the token (errRetired) and goes to the next one.
//   - The other end, reading linkBye, knows that every frame of the
//     closer's was delivered; it does the same and answers linkByeAck,
//     then half-closes the connection and leaves it.
//   - The closer, reading linkByeAck, knows that every frame of the other
//     end's was delivered; it half-closes and leaves it.
//   - Both ends may close at once: each answers the other's linkBye and
//     leaves; the answer to its own comes after, and is ignored.
//
// An end that left the connection reads on until the other's half-close
// and only then closes the socket, so neither end ever writes to a closed
// socket (a reset would be taken for a failure). Meanwhile the peer is
// idle again: a Send dials it anew, and a dial of the peer's that arrives
// while this end has not left yet waits until it has (serveIncoming), so
// the frames of the new connection come after those of the old one.

// FrameLink.A values.
const (
	linkBye    = 1 // the sender writes nothing more on this connection
	linkByeAck = 2 // the answer to linkBye: nor does the sender of this
	linkEnd    = 0 // (never on the wire) the reader's end, to the link worker
)

// errRetired is conn.send's answer when the connection was closed for
// idleness after Send found it: Send takes the next one.
var errRetired = errors.New("tcp: connection closed for idleness")

// idleLoop closes the connections idle for Config.IdleTimeout, until
// Close. It looks every half timeout: a connection is closed at the second
// look that finds it had no frame since the one before.
func (t *Transport) idleLoop() {
	tick := time.NewTicker(t.cfg.IdleTimeout / 2)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			for _, c := range t.idleConns() {
				c.closeIdle()
			}
		case <-t.closing:
			return
		}
	}
}

// idleConns returns the live connections that had no frame at the last
// two looks.
func (t *Transport) idleConns() []*conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idle []*conn
	for _, p := range t.peers {
		if p.state != stateUp {
			continue
		}
		c := p.conn
		if c.active.Swap(false) {
			c.quietLooks = 0
			continue
		}
		if c.quietLooks++; c.quietLooks >= 2 {
			idle = append(idle, c)
		}
	}
	return idle
}

// halfCloser is a stream whose sending side can be closed alone (TCP, and
// TLS, which sends its close_notify).
type halfCloser interface{ CloseWrite() error }

// canHalfClose reports whether nc can be half-closed.
func canHalfClose(nc net.Conn) bool {
	if wc, ok := nc.(*watchedConn); ok {
		nc = wc.Conn
	}
	_, ok := nc.(halfCloser)
	return ok
}

// closeIdle begins the close of an idle connection: it writes linkBye
// unless a write is under way or the connection went on meanwhile. The
// reader finishes the close when the answer comes (onLink).
func (c *conn) closeIdle() {
	t := c.t
	if !canHalfClose(c.nc) {
		return // a wrapped stream that cannot half-close stays open
	}
	select {
	case c.wsem <- struct{}{}:
	default:
		return // a write under way: not idle
	}
	p := c.peer
	t.mu.Lock()
	if t.closed || p.state != stateUp || p.conn != c || c.active.Load() || c.byeSeen {
		t.mu.Unlock()
		<-c.wsem
		return
	}
	p.state = stateClosing
	t.mu.Unlock()
	err := c.lastWrite(linkBye)
	<-c.wsem
	if err != nil && !t.isClosed() {
		c.fail(fmt.Errorf("tcp: write to peer %d (%s): %w", p.id, c.remote, err))
	}
}

// lastWrite retires the connection for writers, writes what is batched,
// then the link frame kind. The write token is held.
func (c *conn) lastWrite(kind uint64) error {
	c.retiring = true
	c.bmu.Lock()
	c.batchShut = true
	c.bmu.Unlock()
	if err := c.writeBatch(); err != nil {
		return err
	}
	h := transport.Header{Type: transport.FrameLink, A: kind, Src: c.t.self}
	h.Encode(c.hdr[:])
	return c.writeRaw(c.hdr[:])
}

// onLink is the reader's handling of a FrameLink: it hands the frame to
// the connection's link worker, which may wait for the write token while
// the reader reads on. A connection carries at most one linkBye and one
// linkByeAck each way; more is a malformed stream.
func (c *conn) onLink(h *transport.Header) error {
	t := c.t
	switch h.A {
	case linkBye:
		t.mu.Lock()
		if c.byeSeen {
			t.mu.Unlock()
			return fmt.Errorf("%w: a second close of the connection", transport.ErrBadFrame)
		}
		c.byeSeen = true
		if p := c.peer; p.state == stateUp && p.conn == c {
			p.state = stateClosing // Sends wait for the next connection
		}
		t.mu.Unlock()
	case linkByeAck:
		if c.ackSeen {
			return fmt.Errorf("%w: a second answer to a close of the connection", transport.ErrBadFrame)
		}
		c.ackSeen = true
	default:
		return fmt.Errorf("%w: link frame %d", transport.ErrBadFrame, h.A)
	}
	if c.links == nil {
		c.links = make(chan uint64, 3)
		c.linksDone = make(chan struct{})
		if !t.goTracked(c.linkWorker) {
			return transport.ErrClosed
		}
	}
	c.links <- h.A
	return nil
}

// endLinks, at the reader's end, lets the link worker finish what the
// link frames read asked (the peer half-closes as soon as it may, maybe
// before this end has left the connection), so that the end of a
// connection closed for idleness is not taken for a failure.
func (c *conn) endLinks() {
	if c.links == nil {
		return
	}
	c.links <- linkEnd
	select {
	case <-c.linksDone:
	case <-c.t.closing:
	}
}

// linkWorker answers the link frames of the connection in their order: a
// linkBye with linkByeAck, then it leaves the connection; a linkByeAck
// (to this end's linkBye) by leaving it. It ends with the reader
// (endLinks).
func (c *conn) linkWorker() {
	t := c.t
	defer close(c.linksDone)
	for {
		var kind uint64
		select {
		case kind = <-c.links:
		case <-t.closing:
			return
		}
		if kind == linkEnd {
			return
		}
		select {
		case c.wsem <- struct{}{}:
		case <-t.closing:
			return
		}
		var err error
		if kind == linkBye {
			err = c.lastWrite(linkByeAck)
		}
		if err == nil && !c.halfClosed {
			c.halfClosed = true
			if err = c.nc.(halfCloser).CloseWrite(); errors.Is(err, errors.ErrUnsupported) {
				// This end cannot half-close (the closer could): its
				// reader closes the socket at the closer's half-close.
				err = nil
			}
		}
		<-c.wsem
		if err != nil {
			if !t.isClosed() {
				c.fail(fmt.Errorf("tcp: closing the idle connection to peer %d (%s): %w", c.peer.id, c.remote, err))
			}
			return
		}
		c.leave()
	}
}

// leave makes the peer idle again, if c is still its connection: the next
// Send dials it. c's reader reads on until the peer's half-close.
func (c *conn) leave() {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	p := c.peer
	if p.conn != c || p.state != stateClosing {
		return
	}
	p.state = stateIdle
	p.conn = nil
	p.ready = make(chan struct{})
	close(c.retired)
	t.stats.connections.Add(-1)
	t.stats.idleClosed.Add(1)
	t.log.Debug("tcp: idle connection closed", "peer", uint32(p.id), "remote", c.remote)
}

// awaitLeftLocked waits, for at most d, until p's connection being closed
// for idleness is left (conn.leave), so that a new one of p's is taken
// only after every frame of the old one was delivered. t.mu is held, and
// released while waiting; it reports false when p is still closing.
func (t *Transport) awaitLeftLocked(p *peer, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for p.state == stateClosing && !t.closed {
		wait := time.Until(deadline)
		if wait <= 0 {
			return false
		}
		left := p.conn.retired
		t.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-left:
		case <-timer.C:
		case <-t.closing:
		}
		timer.Stop()
		t.mu.Lock()
	}
	return !t.closed
}
