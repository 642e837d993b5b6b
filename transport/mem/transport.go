package mem

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Transport is one endpoint of a Network: proc Self() of the job.
type Transport struct {
	net       *Network
	self      transport.Proc
	startedCh chan struct{} // closed by Start
	deadCh    chan struct{} // closed by Kill, Close or Network.Close

	// Guarded by net.mu.
	handler transport.Handler
	started bool
	dead    bool
	cause   error // why it died, as its peers see it
	conns   map[transport.Proc]*conn
	added   map[transport.Proc]bool // endpoints added after New that AddPeer made known

	// links caches this endpoint's outgoing links by peer, so that a Send
	// on a link that exists takes no network-wide lock. A link never
	// changes for a pair; once broken, its stop channel says so.
	links sync.Map // transport.Proc -> *link

	wg sync.WaitGroup // goroutines owned by this endpoint

	mem memFuncs // memory.go
}

var _ transport.Transport = (*Transport)(nil)

// Self returns this endpoint's proc.
func (t *Transport) Self() transport.Proc { return t.self }

// Start begins delivering frames to h. Frames sent to this endpoint before
// Start wait in their links' queues. It returns ErrNilHandler, ErrStarted on
// a second call, or transport.ErrClosed after Close or Kill.
func (t *Transport) Start(h transport.Handler) error {
	if h == nil {
		return ErrNilHandler
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.dead {
		return t.closedErrLocked()
	}
	if t.started {
		return ErrStarted
	}
	t.handler = h
	t.started = true
	close(t.startedCh)
	for _, c := range t.conns {
		if c.broken {
			n.notifyLocked(t, c)
		}
	}
	return nil
}

// Send copies payload into a frame and queues it on the link to peer to.
// It blocks while that link's queue is full, at most until ctx ends. It
// sets h.Len and h.Src. Errors: transport.ErrTooLarge,
// transport.ErrUnknownPeer, ErrNotStarted, transport.ErrClosed after Close,
// Kill or Network.Close, a *PeerError (wrapping transport.ErrPeerDown) when
// the connection to the peer failed, or ctx's error.
func (t *Transport) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if len(payload) > transport.MaxPayload {
		return fmt.Errorf("mem: send of %d bytes to proc %d: %w (limit %d; split the transfer)",
			len(payload), to, transport.ErrTooLarge, transport.MaxPayload)
	}
	n := t.net
	if v, ok := t.links.Load(to); ok {
		l := v.(*link)
		select {
		case <-t.deadCh: // the slow path says why
		case <-l.c.stop:
		default:
			return t.enqueue(ctx, l, h, payload)
		}
	}
	n.mu.Lock()
	if t.dead {
		err := t.closedErrLocked()
		n.mu.Unlock()
		return err
	}
	if !t.started {
		n.mu.Unlock()
		return ErrNotStarted
	}
	if int64(to) >= int64(n.size) {
		n.mu.Unlock()
		return fmt.Errorf("mem: send to proc %d on a network of %d procs: %w", to, n.size, transport.ErrUnknownPeer)
	}
	if !t.knowsLocked(to) {
		n.mu.Unlock()
		return fmt.Errorf("mem: send to proc %d, which joined the network after proc %d started and was not added to it (AddPeer): %w", to, t.self, transport.ErrUnknownPeer)
	}
	l, err := n.linkLocked(t, to)
	n.mu.Unlock()
	if err != nil {
		return err
	}
	t.links.Store(to, l)
	return t.enqueue(ctx, l, h, payload)
}

// enqueue copies a frame onto link l's queue.
func (t *Transport) enqueue(ctx context.Context, l *link, h *transport.Header, payload []byte) error {
	n := t.net
	if err := ctx.Err(); err != nil {
		return err
	}
	h.Len = uint32(len(payload))
	h.Src = t.self
	f := &frame{h: *h, sent: time.Now()}
	if len(payload) > 0 {
		f.payload = append([]byte(nil), payload...)
	}
	select {
	case l.q <- f:
		n.sent.Add(1)
		return nil
	case <-l.c.stop:
		n.mu.Lock()
		defer n.mu.Unlock()
		if t.dead {
			return t.closedErrLocked()
		}
		return l.c.errFor(t.self)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close crashes the endpoint as Kill does (its peers get PeerDown with
// ErrPeerClosed as the cause), then waits for the goroutines it owns: the
// delivery goroutines of links into it, including a HandleFrame in
// progress, and pending PeerDown calls. No Handler call happens after Close
// returns. It is idempotent; do not call it from this endpoint's Handler.
func (t *Transport) Close() error {
	n := t.net
	n.mu.Lock()
	if !n.closed {
		n.killLocked(t, ErrPeerClosed)
	}
	n.mu.Unlock()
	t.wg.Wait()
	return nil
}

func (t *Transport) closedErrLocked() error {
	return fmt.Errorf("mem: proc %d: %w (%v)", t.self, transport.ErrClosed, t.cause)
}

var _ transport.PeerAdder = (*Transport)(nil)

// Addr is this endpoint's address, as AddPeer takes it: "mem:" and its
// Proc.
func (t *Transport) Addr() string { return addrOf(t.self) }

func addrOf(p transport.Proc) string { return fmt.Sprintf("mem:%d", p) }

// AddPeer makes peer p, an endpoint added to the network after this one
// started (Network.AddEndpoint), known to this endpoint, so that Send
// reaches it (transport.PeerAdder); addr must be p's Addr. Adding a known
// peer again, or one of the network's first endpoints (known from the
// start), with its address does nothing. It returns an error wrapping
// ErrBadProc, and changes nothing, for NoProc, this endpoint, a Proc with
// no endpoint, or an address that is not p's; transport.ErrClosed after
// Close or Kill. Safe concurrently with Send.
func (t *Transport) AddPeer(p transport.Proc, addr string) error {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case p == transport.NoProc:
		return fmt.Errorf("%w: AddPeer of NoProc (address %q)", ErrBadProc, addr)
	case p == t.self:
		return fmt.Errorf("%w: AddPeer of proc %d, this endpoint: give it the joined process's own id", ErrBadProc, p)
	case int64(p) >= int64(n.size):
		return fmt.Errorf("%w: AddPeer of proc %d on a network of %d procs: add its endpoint first (Network.AddEndpoint)", ErrBadProc, p, n.size)
	case addr != addrOf(p):
		return fmt.Errorf("%w: AddPeer of proc %d at %q, but its address is %q (Transport.Addr)", ErrBadProc, p, addr, addrOf(p))
	case t.dead:
		return t.closedErrLocked()
	}
	if int(p) >= n.base {
		if t.added == nil {
			t.added = make(map[transport.Proc]bool)
		}
		t.added[p] = true
	}
	return nil
}

// knowsLocked reports whether this endpoint may send to peer: one of the
// network's first endpoints, one added with AddPeer, or one that made a
// connection to it (as an accepted TCP connection carries replies).
// net.mu is held.
func (t *Transport) knowsLocked(peer transport.Proc) bool {
	return int(peer) < t.net.base || peer == t.self || t.added[peer] || t.conns[peer] != nil
}

func (t *Transport) addConn(peer transport.Proc, c *conn) {
	if t.conns == nil {
		t.conns = make(map[transport.Proc]*conn)
	}
	t.conns[peer] = c
}

// goFunc runs fn on a goroutine owned by t and by the network. Callers hold
// net.mu and have checked that neither t nor the network is closed, so no
// Add races with the Waits in Close.
func (t *Transport) goFunc(fn func()) {
	t.wg.Add(1)
	t.net.wg.Add(1)
	go func() {
		defer t.net.wg.Done()
		defer t.wg.Done()
		fn()
	}()
}
