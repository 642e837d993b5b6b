package tcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
	"github.com/gaspigo/gaspigo/transport"
)

var _ transport.Transport = (*Transport)(nil)

// closeFlush bounds how long Close spends writing batched frames.
const closeFlush = 200 * time.Millisecond

// peerState is where the one connection to a peer stands.
type peerState uint8

const (
	stateIdle    peerState = iota // no connection (yet, or any more: idle.go); this side may be dialing: peer.dialing
	stateUp                       // connected and authenticated
	stateClosing                  // the connection is being closed for idleness (idle.go); Sends wait for the next
	stateDown                     // failed; never reconnected
)

// peer is the per-peer state, guarded by Transport.mu. It exists for the
// peers named by SetPeers and those that connected; only a connected one
// has goroutines and buffers.
type peer struct {
	id       transport.Proc
	addr     string // "" until SetPeers names it (a peer may dial first)
	state    peerState
	ready    chan struct{} // closed when state leaves stateIdle (new when it comes back)
	conn     *conn         // set in stateUp and stateClosing (and kept in stateDown)
	err      error         // why the peer is down
	notified bool          // Handler.PeerDown was called (or is being)
	dialing  bool          // a dial goroutine of this process works on this peer
	// accepting is the peer's dial this process accepted and awaits the
	// confirmation of (see the package doc); settled closes when that ends.
	accepting net.Conn
	settled   chan struct{}
}

// Transport is the TCP implementation of transport.Transport. See the
// package documentation for the connection rules.
type Transport struct {
	cfg  Config
	self transport.Proc
	log  *slog.Logger

	ctx       context.Context // cancelled by Close; bounds dials
	cancel    context.CancelFunc
	closing   chan struct{} // closed by Close
	started   chan struct{} // closed by Start
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	handler transport.Handler
	peers   map[transport.Proc]*peer
	sockets map[net.Conn]struct{} // every authenticated or dialled socket, so Close can cut it

	stats counters
	lis   *listen.Listener // accepts, admits and authenticates the incoming connections
	hs    atomic.Int64     // Config.HandshakeTimeout, or SetHandshakeTimeout's
	spin  atomic.Int64     // Config.PollSpin, or SetPollSpin's

	hooks hooks
}

// hooks let tests observe events that leave no other trace; all nil in
// production.
type hooks struct {
	onRefuse func(remote string, err error) // after a refusal is counted
	onProbe  func(remote string)            // after a probe connection is counted
	onDial   func(peer transport.Proc)      // before each dial attempt
}

// New checks cfg, binds the listener (or adopts cfg.Listener) and starts
// accepting connections. Frames are delivered only after Start.
func New(cfg Config) (*Transport, error) { return newTransport(cfg, hooks{}) }

func newTransport(cfg Config, hk hooks) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	var err error
	if ln == nil {
		ln, err = net.Listen("tcp", cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("tcp: listen on %s: %w", cfg.ListenAddr, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Token = append([]byte(nil), cfg.Token...)
	t := &Transport{
		cfg:     cfg,
		self:    cfg.Self,
		log:     log.With("self", uint32(cfg.Self)),
		closing: make(chan struct{}),
		started: make(chan struct{}),
		peers:   make(map[transport.Proc]*peer),
		sockets: make(map[net.Conn]struct{}),
		hooks:   hk,
	}
	t.hs.Store(int64(cfg.HandshakeTimeout))
	t.spin.Store(int64(cfg.PollSpin))
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.lis, err = listen.New(ln, listen.Config{
		Name: "tcp", Purpose: auth.PurposeData, Token: cfg.Token, Self: uint32(cfg.Self), TLS: cfg.TLS,
		HandshakeTimeout: cfg.HandshakeTimeout, Log: t.log, Prepare: t.prepare, Refused: t.refused,
	}, t.serveIncoming)
	if err != nil {
		t.cancel()
		_ = ln.Close()
		return nil, err
	}
	t.lis.Start()
	return t, nil
}

// Self returns this process's ID.
func (t *Transport) Self() transport.Proc { return t.self }

// HandshakeTimeout is the bound on one connection's handshake in force.
func (t *Transport) HandshakeTimeout() time.Duration { return time.Duration(t.hs.Load()) }

// SetHandshakeTimeout changes Config.HandshakeTimeout, for the
// connections made or accepted from now on: a job whose host turns out
// oversubscribed lengthens it with its other timeouts, so that a starved
// peer's late proof is not taken for a refusal. Values below a
// millisecond count as one.
func (t *Transport) SetHandshakeTimeout(d time.Duration) {
	d = max(d, time.Millisecond)
	t.hs.Store(int64(d))
	t.lis.SetHandshakeTimeout(d)
}

// SetPollSpin sets Config.PollSpin for the connections made from now on:
// the job chooses it once it knows how many of its processes share this
// host. Outside 0..10ms it is clamped.
func (t *Transport) SetPollSpin(d time.Duration) {
	t.spin.Store(int64(min(max(d, 0), maxPollSpin)))
}

// Addr returns the address the listener is bound to, e.g. "127.0.0.1:40123".
// With a wildcard ListenAddr the host part is the wildcard; a launcher
// combines the port with a reachable host name.
func (t *Transport) Addr() string { return t.lis.Addr().String() }

// SetPeers records the address of each peer (entries for Self are ignored).
// It may be called again to add peers, e.g. after a membership change; a
// known peer cannot change its address, since a process is never restarted
// under the same Proc. Nothing is dialed here: a peer is dialed by the
// first Send to it (see the package doc). The table is checked as a whole:
// on error nothing is applied.
func (t *Transport) SetPeers(addrs map[transport.Proc]string) error {
	var bad []string
	for id, addr := range addrs {
		if err := peerAddrErr(id, addr); err != nil {
			bad = append(bad, err.Error())
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	for id, addr := range addrs {
		if p := t.peers[id]; p != nil && p.addr != "" && p.addr != addr {
			bad = append(bad, fmt.Sprintf("peer %d: address %q, but it is already known at %q", id, addr, p.addr))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: %v", ErrPeers, bad)
	}
	for id, addr := range addrs {
		if id == t.self {
			continue
		}
		t.peerLocked(id).addr = addr
	}
	return nil
}

var _ transport.PeerAdder = (*Transport)(nil)

// AddPeer records the address of p, a process that joined the job after
// this transport started (transport.PeerAdder); like SetPeers with one
// entry, it dials nothing: the first Send to p does. Adding a known peer
// again with the same address does nothing. It returns an error wrapping
// ErrPeers, and changes nothing, for NoProc, this process, an address
// that is not host:port with a port 1..65535, or a known peer with
// another address (a process is never restarted under the same Proc: a
// new process has a new id); transport.ErrClosed after Close. Safe
// concurrently with Send, dials and accepts: a Send to p that ran before
// AddPeer returned ErrUnknownPeer, and a dial that p made first is kept.
func (t *Transport) AddPeer(p transport.Proc, addr string) error {
	if err := peerAddrErr(p, addr); err != nil {
		return fmt.Errorf("%w: AddPeer: %w", ErrPeers, err)
	}
	if p == t.self {
		return fmt.Errorf("%w: AddPeer of proc %d, this process: give it the joined process's own id", ErrPeers, p)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	pr := t.peers[p]
	switch {
	case pr != nil && pr.addr == addr:
		return nil
	case pr != nil && pr.addr != "":
		return fmt.Errorf("%w: AddPeer: peer %d at %q, but it is already known at %q (a new process needs a new id)", ErrPeers, p, addr, pr.addr)
	}
	t.peerLocked(p).addr = addr
	return nil
}

// peerAddrErr says what is wrong with addr as peer id's address, nil when
// nothing is: id must name a process and addr be host:port with a port
// 1..65535 (a host name or an IP; empty means this host).
func peerAddrErr(id transport.Proc, addr string) error {
	if id == transport.NoProc {
		return fmt.Errorf("NoProc has address %q", addr)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("peer %d: address %q is not host:port (%v)", id, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("peer %d: address %q has port %q, want 1..65535", id, addr, port)
	}
	return nil
}

// peerLocked returns the state of peer id, creating it. t.mu is held.
func (t *Transport) peerLocked(id transport.Proc) *peer {
	p := t.peers[id]
	if p == nil {
		p = &peer{id: id, ready: make(chan struct{})}
		t.peers[id] = p
	}
	return p
}

// dialLocked starts the dialer of p unless one runs already. t.mu is held,
// so Close cannot be waiting yet.
func (t *Transport) dialLocked(p *peer) {
	if t.closed || p.addr == "" || p.dialing || p.accepting != nil || p.state != stateIdle {
		return
	}
	p.dialing = true
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.dialLoop(p)
	}()
}

// Start begins delivering frames to h. It dials nobody: the first Send to
// a peer does.
func (t *Transport) Start(h transport.Handler) error {
	if h == nil {
		return fmt.Errorf("tcp: Start with a nil Handler")
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	if t.handler != nil {
		t.mu.Unlock()
		return ErrStarted
	}
	t.handler = h
	close(t.started)
	if t.cfg.IdleTimeout > 0 {
		t.wg.Add(1) // t.mu is held and t is not closed
		go func() {
			defer t.wg.Done()
			t.idleLoop()
		}()
	}
	// Peers given up on before Start (Disconnect) are told now.
	type downPeer struct {
		id  transport.Proc
		err error
	}
	var down []downPeer
	for _, p := range t.peers {
		if p.state == stateDown && !p.notified {
			p.notified = true
			down = append(down, downPeer{p.id, p.err})
		}
	}
	t.mu.Unlock()
	for _, d := range down {
		h.PeerDown(d.id, d.err)
	}
	return nil
}

// Stats is a snapshot of a Transport's counters.
type Stats struct {
	FramesIn, FramesOut uint64 // frames delivered to the handler / fully written
	BytesIn, BytesOut   uint64 // payload bytes of those frames (headers not counted)
	HandshakesRefused   uint64 // connections refused: failed handshake (timeouts included), wrong or duplicate proc, failed dial handshake
	HandshakesTimedOut  uint64 // of the refusals: those whose handshake ran out of time
	HandshakesShed      uint64 // accepted connections closed unauthenticated to make room for newer ones (package internal/admit)
	HandshakesAccepted  uint64 // connections accepted (each enters the admission gate)
	Probes              uint64 // accepted connections closed by the remote end before sending a byte (port scans, liveness checks)
	BadFrames           uint64 // malformed headers from authenticated peers (each closed the connection)
	HandlerErrors       uint64 // frames the handler rejected with an error
	PeersDown           uint64 // Handler.PeerDown calls
	DialAttempts        uint64 // TCP connect attempts
	DialsCrossed        uint64 // connections closed unused because the pair's other dial won (both ends dialed at once)
	Connections         int    // connections open now (one per peer talked to)
	IdleClosed          uint64 // connections closed for idleness (Config.IdleTimeout), by either end
}

// Stats returns the current counters.
func (t *Transport) Stats() Stats {
	s := &t.stats
	ad := t.lis.Stats()
	return Stats{
		FramesIn:           s.framesIn.Load(),
		FramesOut:          s.framesOut.Load(),
		BytesIn:            s.bytesIn.Load(),
		BytesOut:           s.bytesOut.Load(),
		HandshakesRefused:  s.handshakesRefused.Load(),
		HandshakesTimedOut: ad.TimedOut,
		HandshakesShed:     ad.Shed,
		HandshakesAccepted: ad.Accepted,
		Probes:             s.probes.Load(),
		BadFrames:          s.badFrames.Load(),
		HandlerErrors:      s.handlerErrors.Load(),
		PeersDown:          s.peersDown.Load(),
		DialAttempts:       s.dialAttempts.Load(),
		DialsCrossed:       s.dialsCrossed.Load(),
		Connections:        int(s.connections.Load()),
		IdleClosed:         s.idleClosed.Load(),
	}
}

// Close closes the listener and every connection and waits for every
// goroutine of the transport, including a HandleFrame or PeerDown call in
// progress. No PeerDown is reported for connections Close cuts. Close is
// idempotent; concurrent calls all wait. Frames still batched
// (Config.BatchFrame) are written first, for at most closeFlush.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		close(t.closing)
		t.cancel()
		socks := make([]net.Conn, 0, len(t.sockets))
		for nc := range t.sockets {
			socks = append(socks, nc)
		}
		var conns []*conn
		for _, p := range t.peers {
			if p.state == stateUp || p.state == stateClosing {
				conns = append(conns, p.conn)
			}
		}
		t.mu.Unlock()
		// Frames still batched leave first, within a bound: their Sends
		// returned, as if they had been written.
		deadline := time.Now().Add(closeFlush)
		for _, c := range conns {
			c.flushOnClose(deadline)
		}
		for _, nc := range socks {
			_ = nc.Close()
		}
		_ = t.lis.Close() // stops accepting, cuts handshakes, waits for the readers
		t.wg.Wait()
	})
	return nil
}

// track registers an open socket so Close can cut it; false after Close.
func (t *Transport) track(nc net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.sockets[nc] = struct{}{}
	return true
}

// retrack makes sc, the stream over the tracked socket nc (TLS over it, or
// nc itself), the one Close cuts, and returns it.
func (t *Transport) retrack(nc, sc net.Conn) net.Conn {
	if sc == nc {
		return nc
	}
	t.mu.Lock()
	if _, ok := t.sockets[nc]; ok {
		delete(t.sockets, nc)
		t.sockets[sc] = struct{}{}
	}
	t.mu.Unlock()
	return sc
}

// closeSocket closes and forgets nc.
func (t *Transport) closeSocket(nc net.Conn) {
	t.mu.Lock()
	delete(t.sockets, nc)
	t.mu.Unlock()
	_ = nc.Close()
}

func (t *Transport) isClosed() bool {
	select {
	case <-t.closing:
		return true
	default:
		return false
	}
}

// Connected reports whether a connection to peer is open now. The runtime
// says goodbye at Close only to the peers it is connected to (pgas): the
// others have no connection whose end they could take for a failure.
func (t *Transport) Connected(peer transport.Proc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[peer]
	return p != nil && p.state == stateUp
}

// Disconnect closes the connection to peer for good, as if it had failed
// with cause: a frame being read from it is cut off where it is (nothing
// more of it lands), pending Sends fail, and PeerDown follows. The runtime
// calls it for a process its membership declared failed, which may be
// merely paused and would otherwise finish a stale frame later.
func (t *Transport) Disconnect(id transport.Proc, cause error) {
	t.mu.Lock()
	p := t.peers[id]
	if p == nil || t.closed {
		t.mu.Unlock()
		return
	}
	switch p.state {
	case stateUp, stateClosing:
		c := p.conn
		t.mu.Unlock()
		c.fail(cause)
	case stateIdle:
		t.mu.Unlock()
		t.giveUp(p, cause)
	default:
		t.mu.Unlock()
	}
}
