package spares

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
	"github.com/gaspigo/gaspigo/internal/tcpopt"
	"github.com/hashicorp/raft"
)

// authListener hands out the connections that pass the job-token
// handshake for its purpose, taken from the process's one listener
// (internal/listen: admission gate, handshake, TLS). Each goes to serve,
// or, when serve is nil, waits for Accept (Raft's stream layer). It owns
// the connections it handed out, both directions: Close closes them.
type authListener struct {
	lis     *listen.Listener
	token   []byte
	secure  bool // TLS over each connection after its handshake (Config.TLS)
	purpose auth.Purpose
	self    uint32
	serve   func(*authConn) // nil: Accept hands the connections out

	// onLost, when set, is told the peer of an accepted connection that
	// the far side ended (EOF or reset), not this side's Close.
	onLost atomic.Pointer[func(peer uint32)]

	conns chan *authConn
	done  chan struct{}
	// dials ends at Close: a Raft dial still in its handshake then fails
	// at once instead of holding Raft's shutdown until its deadline.
	dials    context.Context
	stopDial context.CancelFunc
	once     sync.Once

	mu   sync.Mutex
	live map[*authConn]struct{} // connections handed out, both directions
}

// authConn is an authenticated connection and the peer's process id. When
// it belongs to a listener, the listener closes it on Close: Raft's
// transport neither closes its pooled connections nor the ones it serves
// when it shuts down, and their goroutines would block in Read forever.
type authConn struct {
	net.Conn
	peer     uint32
	l        *authListener
	accepted bool // from Accept, not dialed by this process
	once     sync.Once
	closing  atomic.Bool
	lost     atomic.Bool
}

// Read reports an accepted connection that the far side ended to the
// listener's onLost, once.
func (c *authConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.accepted && c.l != nil && !c.closing.Load() && peerEnded(err) && c.lost.CompareAndSwap(false, true) {
		if f := c.l.onLost.Load(); f != nil {
			(*f)(c.peer)
		}
	}
	return n, err
}

// peerEnded: the error is the far side's kernel closing the connection.
func peerEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func (c *authConn) Close() error {
	var err error
	c.closing.Store(true)
	c.once.Do(func() {
		if c.l != nil {
			c.l.mu.Lock()
			delete(c.l.live, c)
			c.l.mu.Unlock()
		}
		err = c.Conn.Close()
	})
	return err
}

// track registers c with the listener; it fails once the listener closed.
func (l *authListener) track(c *authConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		return false
	default:
	}
	c.l = l
	l.live[c] = struct{}{}
	return true
}

// newAuthListener starts taking connections for purpose p from ln, which
// it owns from here on.
func newAuthListener(ln net.Listener, token []byte, secure bool, p auth.Purpose, self uint32, timeout time.Duration, peers int, log *slog.Logger, serve func(*authConn)) (*authListener, error) {
	l := &authListener{
		token: token, secure: secure, purpose: p, self: self, serve: serve,
		conns: make(chan *authConn),
		done:  make(chan struct{}),
		live:  map[*authConn]struct{}{},
	}
	lis, err := listen.New(ln, listen.Config{
		Name: "spares " + purposeName(p), Purpose: p, Token: token, Self: self, TLS: secure,
		HandshakeTimeout: timeout, Peers: peers, Log: log,
		// Every process of a local job may ask a voter at once (its
		// standing, at the end of the job): all from one address, more
		// than the shared gate holds at 2,048 (181 shed at one voter).
		Gate: admit.For(peers),
	}, l.accepted)
	if err != nil {
		ln.Close()
		return nil, err
	}
	l.lis = lis
	l.dials, l.stopDial = context.WithCancel(context.Background())
	lis.Start()
	return l, nil
}

// accepted takes an authenticated connection from the listener.
func (l *authListener) accepted(c net.Conn, peer uint32) {
	_ = c.SetDeadline(time.Time{})
	ac := &authConn{Conn: c, peer: peer, accepted: true}
	if !l.track(ac) {
		c.Close()
		return
	}
	if l.serve != nil {
		l.serve(ac)
		return
	}
	select {
	case l.conns <- ac:
	case <-l.done:
		ac.Close()
	}
}

// Accept returns the next authenticated connection, or net.errClosed after Close.
func (l *authListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, closes the connections handed out and waits for
// the listener's goroutines. Idempotent.
func (l *authListener) Close() error {
	l.once.Do(func() {
		l.stopDial()
		l.mu.Lock()
		close(l.done)
		live := make([]*authConn, 0, len(l.live))
		for c := range l.live {
			live = append(live, c)
		}
		l.mu.Unlock()
		for _, c := range live {
			c.Close()
		}
		l.lis.Close()
	})
	return nil
}

func (l *authListener) Addr() net.Addr { return l.lis.Addr() }

// dialAuth dials addr and runs the handshake as the dialing side. The
// returned connection has no deadline set.
func dialAuth(ctx context.Context, addr string, token []byte, secure bool, p auth.Purpose, self uint32, timeout time.Duration, wrap func(net.Conn) net.Conn) (*authConn, error) {
	d := net.Dialer{Control: tcpopt.Control}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		c = wrap(c)
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	// ctx ending (the caller giving up, the stream closing) ends the
	// handshake at once, not at its deadline.
	raw := c
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	c, peer, err := auth.Dial(c, token, p, self, secure)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("spares: %s connection to %s: %w", purposeName(p), addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return &authConn{Conn: c, peer: peer}, nil
}

// raftStream is the raft.StreamLayer: TCP with the job-token handshake on
// both ends, purpose "raft". Raft's own NetworkTransport runs on top, so the
// control plane never shares a connection with the data plane.
type raftStream struct {
	*authListener
	timeout   time.Duration
	advertise string                  // the member's RaftAddr: what the others dial
	wrap      func(net.Conn) net.Conn // Config.WrapConn
}

// Addr is the advertised address (Raft reports it as this node's address),
// not the bound one, which may be a wildcard.
func (s *raftStream) Addr() net.Addr { return tcpAddrString(s.advertise) }

type tcpAddrString string

func (a tcpAddrString) Network() string { return "tcp" }
func (a tcpAddrString) String() string  { return string(a) }

var _ raft.StreamLayer = (*raftStream)(nil)

func (s *raftStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 || timeout > s.timeout {
		timeout = s.timeout
	}
	c, err := dialAuth(s.dials, string(addr), s.token, s.secure, purposeRaft, s.self, timeout, s.wrap)
	if err != nil {
		return nil, err
	}
	if !s.track(c) {
		c.Close()
		return nil, net.ErrClosed
	}
	return c, nil
}

func purposeName(p auth.Purpose) string {
	n := 0
	for n < len(p) && p[n] != 0 {
		n++
	}
	return string(p[:n])
}

// Peer is the process the handshake proved.
func (c *authConn) Peer() uint32 { return c.peer }
