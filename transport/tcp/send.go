package tcp

import (
	"context"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

// Send writes one frame to peer to with a single writev straight from
// payload, and returns once the kernel has all of it. It sets h.Len and
// h.Src. The first Send to a peer that is not connected dials it (unless
// a dial of the peer's is being set up) and waits for the connection,
// bounded by ctx; the dial goes on in the background when ctx ends first.
// The end of ctx (deadline or cancellation) interrupts a blocked write:
// when nothing of the frame was written the error wraps ctx.Err(); when
// part of it was, the rest is copied and written in the background (the
// frame will arrive, and the connection stays usable) and the error still
// wraps ctx.Err(). A write that fails otherwise makes the peer down: the
// error is a *PeerDownError.
func (t *Transport) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	return t.send(ctx, to, h, payload, false)
}

// SendLater is Send for a frame that nobody waits for yet
// (transport.Lingerer): a small one stays in the connection's batch until
// a Send or Queue of a small frame to the same peer takes it along (when
// the connection is idle, the caller writes the batch and its own frame
// with one system call), or for Config.Linger at most, so that a stream
// of them leaves with one system call. A larger one is written at once,
// with the batch before it, as by Send.
func (t *Transport) SendLater(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	return t.send(ctx, to, h, payload, true)
}

func (t *Transport) send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte, linger bool) error {
	if len(payload) > transport.MaxPayload {
		return fmt.Errorf("%w: %d bytes to peer %d, cap %d; split the transfer", transport.ErrTooLarge, len(payload), to, transport.MaxPayload)
	}
	for {
		c, err := t.connTo(ctx, to)
		if err != nil {
			return err
		}
		h.Len = uint32(len(payload))
		h.Src = t.self
		if err := c.send(ctx, h, payload, linger); err != errRetired {
			return err
		}
		// Closed for idleness since connTo found it: the next one.
	}
}

// connTo returns the live connection to peer to, dialing it and waiting
// for it to come up.
func (t *Transport) connTo(ctx context.Context, to transport.Proc) (*conn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if t.handler == nil {
			t.mu.Unlock()
			return nil, ErrNotStarted
		}
		p := t.peers[to]
		if p == nil {
			t.mu.Unlock()
			if to == t.self {
				return nil, fmt.Errorf("%w: %d is this process; deliver to self locally", transport.ErrUnknownPeer, to)
			}
			return nil, fmt.Errorf("%w: no address for peer %d (call SetPeers)", transport.ErrUnknownPeer, to)
		}
		switch p.state {
		case stateUp:
			c := p.conn
			t.mu.Unlock()
			return c, nil
		case stateDown:
			err := p.err
			t.mu.Unlock()
			return nil, &PeerDownError{Peer: to, Err: err}
		case stateClosing:
			left := p.conn.retired
			t.mu.Unlock()
			select {
			case <-left:
				continue
			case <-t.closing:
				return nil, transport.ErrClosed
			case <-ctx.Done():
				return nil, fmt.Errorf("tcp: send to peer %d: its idle connection is being closed: %w", to, ctx.Err())
			}
		}
		if p.addr == "" && !p.dialing && p.accepting == nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: no address for peer %d (call SetPeers)", transport.ErrUnknownPeer, to)
		}
		// While a dial of the peer's awaits its confirmation, wait for
		// that (settled); dial if it falls through.
		ready, settled := p.ready, p.settled
		t.dialLocked(p)
		t.mu.Unlock()
		select {
		case <-ready:
		case <-settled:
		case <-t.closing:
			return nil, transport.ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("tcp: send to peer %d: no connection yet: %w", to, ctx.Err())
		}
	}
}

// Queue sends a small frame (at most Config.BatchFrame bytes with its
// header) without blocking, as Send does one (written at once when the
// connection is idle, else queued to its batch), and reports whether it
// did: false when batching is off, the frame is too large, the peer is
// not connected (or down), or the batch is full. A Handler may call it
// from HandleFrame, even for the peer it is reading from; on false the
// caller sends the frame with Send from a goroutine that may block. h.Len
// and h.Src are set as by Send.
func (t *Transport) Queue(to transport.Proc, h *transport.Header, payload []byte) bool {
	if transport.HeaderSize+len(payload) > t.cfg.BatchFrame {
		return false
	}
	t.mu.Lock()
	p := t.peers[to]
	if t.closed || p == nil || p.state != stateUp {
		t.mu.Unlock()
		return false
	}
	c := p.conn
	t.mu.Unlock()
	h.Len = uint32(len(payload))
	h.Src = t.self
	if done, err := c.writeNow(h, payload); done {
		return err == nil
	}
	return c.enqueue(h, payload, false)
}
