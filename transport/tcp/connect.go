package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/tcpopt"
	"github.com/gaspigo/gaspigo/transport"
)

// prepare readies an accepted socket for its handshake (run by the
// listener, internal/listen): the socket options, then a record of what
// the handshake reads, under TLS below the TLS layer.
func (t *Transport) prepare(nc net.Conn) net.Conn {
	t.tune(nc)
	wc := &watchedConn{Conn: nc}
	if t.cfg.TLS {
		wc.Conn = &tlsSocket{Conn: nc}
	}
	return wc
}

// refused is told by the listener of a connection whose handshake failed.
// One closed by the remote end before it sent a byte is a liveness probe
// or a port scan: counted, nothing to refuse.
func (t *Transport) refused(c net.Conn, remote string, err error) {
	if wc, ok := c.(*watchedConn); ok && wc.read == 0 && wc.err != nil && !errors.Is(wc.err, os.ErrDeadlineExceeded) && !t.isClosed() {
		t.stats.probes.Add(1)
		t.log.Debug("tcp: probe connection", "remote", remote)
		if t.hooks.onProbe != nil {
			t.hooks.onProbe(remote)
		}
		return
	}
	t.refuse(c, remote, transport.NoProc, fmt.Errorf("%w: %w", transport.ErrAuth, err))
}

// serveIncoming takes an authenticated connection from the listener,
// gives the dialer its verdict (verdictLocked) and, when it is accepted,
// runs its reader. A connection whose dial crossed this process's own is
// dropped quietly.
func (t *Transport) serveIncoming(nc net.Conn, id uint32) {
	remote := nc.RemoteAddr().String()
	watchedOf(nc).sealed = true
	if !t.track(nc) {
		_ = nc.Close()
		return
	}
	from := transport.Proc(id)
	if from == t.self {
		t.refuse(nc, remote, from, fmt.Errorf("a connection claims to come from proc %d, this process", from))
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.closeSocket(nc)
		return
	}
	p := t.peerLocked(from)
	// A dial that comes while this end has not left the connection it
	// closes for idleness yet waits for that: the old one's frames first.
	t.awaitLeftLocked(p, time.Duration(t.hs.Load()))
	if t.closed {
		t.mu.Unlock()
		t.closeSocket(nc)
		return
	}
	v, why := t.verdictLocked(p)
	if v != verdictAccept {
		t.mu.Unlock()
		_, _ = nc.Write([]byte{v}) // still bounded by the handshake's deadline
		if v == verdictCrossed {
			t.closeSocket(nc)
			t.stats.dialsCrossed.Add(1)
			t.log.Debug("tcp: dial crossed this process's own; closed it", "peer", uint32(from), "remote", remote)
			return
		}
		t.refuse(nc, remote, from, why)
		return
	}
	if old := p.accepting; old != nil {
		// A dialer has one attempt at a time: it gave the older one up
		// before it confirmed (its handshake ran out of time).
		_ = old.Close()
	}
	p.accepting = nc
	settled := make(chan struct{})
	p.settled = settled
	t.mu.Unlock()
	// The dialer confirms the verdict before either end takes the
	// connection as established, so a dialer whose handshake timed out
	// (and that closed the connection and dials again) costs no PeerDown.
	_, err := nc.Write([]byte{verdictAccept})
	var ack [1]byte
	if err == nil {
		_ = nc.SetDeadline(time.Time{}) // the dialer's own deadline bounds it
		_, err = io.ReadFull(nc, ack[:])
		if err == nil && ack[0] != verdictAccept {
			err = fmt.Errorf("confirmation %q", ack[0])
		}
	}
	t.mu.Lock()
	mine := p.accepting == nc
	if mine {
		p.accepting, p.settled = nil, nil
		close(settled)
	}
	if err != nil || !mine || t.closed || p.state != stateIdle {
		t.mu.Unlock()
		t.closeSocket(nc)
		if !t.isClosed() {
			t.log.Debug("tcp: accepted dial abandoned before its confirmation", "peer", uint32(from), "remote", remote, "err", err)
		}
		return
	}
	c := t.upLocked(p, nc, false)
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

// watchedOf finds the watchedConn under an accepted connection.
func watchedOf(c net.Conn) *watchedConn {
	if ac, ok := c.(auth.Conn); ok {
		c = ac.NetConn()
	}
	return c.(*watchedConn)
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

// CloseWrite half-closes the connection under it, when that can.
func (c *watchedConn) CloseWrite() error {
	if hc, ok := c.Conn.(halfCloser); ok {
		return hc.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && !c.sealed && c.err == nil {
		c.err = err
	}
	return n, err
}

// Verdicts: the first byte the accepting end writes on an authenticated
// connection, which the dialer reads before it takes the connection as
// established (or not). A dialer never writes a frame before it.
const (
	// verdictAccept: the connection is the pair's once the dialer has
	// written the same byte back (its confirmation); frames follow.
	verdictAccept byte = 'A'
	// verdictCrossed: both ends dialed at once and the other dial wins
	// (the one dialed by the lower Proc), or already won. The dialer closes
	// this one and waits for the other; nobody counts it as a refusal.
	verdictCrossed byte = 'X'
	// verdictRefused: a connection that breaks the rules (a duplicate of
	// one the acceptor holds from the dialer). The dialer retries, within
	// DialMaxElapsed.
	verdictRefused byte = 'R'
	// verdictDown: the acceptor holds the dialer down for good (a Proc is
	// never reused); the dialer gives up at once.
	verdictDown byte = 'D'
)

// errCrossed is a dial attempt's error when the pair's other dial won.
var errCrossed = errors.New("tcp: the peer is dialing this process and its dial wins")

// verdictLocked decides what becomes of an authenticated connection from
// p, and why when it is refused. The rule for two dials that cross: the
// one dialed by the lower Proc is kept. t.mu is held.
func (t *Transport) verdictLocked(p *peer) (byte, error) {
	switch {
	case p.state == stateDown:
		return verdictDown, fmt.Errorf("proc %d is already down (a Proc is never reused)", p.id)
	case p.state == stateUp && p.conn.dialed:
		return verdictCrossed, nil // this process's dial won
	case p.state == stateUp:
		return verdictRefused, fmt.Errorf("proc %d is already connected", p.id)
	case p.state == stateClosing:
		return verdictRefused, fmt.Errorf("proc %d: the connection closed for idleness is still being closed", p.id)
	case p.dialing && p.id > t.self:
		return verdictCrossed, nil // this process is dialing and is the lower
	}
	return verdictAccept, nil
}

// dialLoop connects to p, which a Send is waiting for, with exponential
// backoff, bounded by Close and DialMaxElapsed, then runs the connection's
// reader. It stops as soon as p comes up another way (the peer's dial
// crossed this one and won). A peer that cannot be reached is reported
// down.
func (t *Transport) dialLoop(p *peer) {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.cfg.DialInitialInterval),
		backoff.WithMaxInterval(t.cfg.DialMaxInterval),
		backoff.WithMaxElapsedTime(0), // bounded below, by DialMaxElapsed
	)
	begin := time.Now()
	refused := 0 // connects refused in a row
	for attempts := 1; ; attempts++ {
		t.mu.Lock()
		if t.closed || p.state != stateIdle {
			p.dialing = false
			t.mu.Unlock()
			return
		}
		addr, ready := p.addr, p.ready
		t.mu.Unlock()
		if t.hooks.onDial != nil {
			t.hooks.onDial(p.id)
		}
		nc, err := t.dialOnce(p.id, addr)
		if err == nil {
			t.mu.Lock()
			// This end may not have left the connection it closes for
			// idleness yet, when the peer has: the old one's frames first.
			t.awaitLeftLocked(p, time.Duration(t.hs.Load()))
			if t.closed || p.state != stateIdle || p.accepting != nil {
				// Close, or Disconnect, won the race (a dial of the
				// peer's awaiting confirmation cannot: see verdictLocked).
				p.dialing = false
				t.mu.Unlock()
				t.closeSocket(nc)
				return
			}
			c := t.upLocked(p, nc, true)
			t.mu.Unlock()
			c.readLoop()
			return
		}
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			if errors.Is(err, transport.ErrClosed) {
				return
			}
			t.giveUp(p, fmt.Errorf("tcp: dial peer %d at %s: %w", p.id, addr, perm.Err))
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
		} else {
			refused = 0
		}
		if refused >= deadRefusals {
			// Every listener is bound before its address is published, so
			// nothing listening there means its process is gone.
			t.giveUp(p, fmt.Errorf("tcp: dial peer %d: nothing listens at %s any more (%d connects refused in a row): %w",
				p.id, addr, refused, err))
			return
		}
		elapsed := time.Since(begin)
		if elapsed >= t.cfg.DialMaxElapsed {
			t.giveUp(p, fmt.Errorf("tcp: dial peer %d at %s: gave up after %d attempts in %v: %w",
				p.id, addr, attempts, elapsed.Round(time.Millisecond), err))
			return
		}
		next := b.NextBackOff()
		if !errors.Is(err, errCrossed) {
			t.log.Debug("tcp: dial failed; retrying", "peer", uint32(p.id), "addr", addr,
				"attempt", attempts, "retry_in", next, "err", err)
		}
		timer := time.NewTimer(next)
		select {
		case <-ready: // up through the peer's dial (or down)
		case <-t.closing:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// deadRefusals is how many refused connects in a row show that nothing
// listens at a peer's address any more.
const deadRefusals = 3

// giveUp declares the peer p, which never connected, down with cause.
func (t *Transport) giveUp(p *peer, cause error) {
	t.mu.Lock()
	if t.closed || p.state != stateIdle {
		t.mu.Unlock()
		return
	}
	p.state = stateDown
	p.err = cause
	// Before Start there is no handler to tell (a joiner's runtime cuts
	// off the processes its first view lists as failed before it starts
	// the transport): Start tells it then.
	p.notified = t.handler != nil
	p.dialing = false
	close(p.ready)
	h, addr := t.handler, p.addr
	t.mu.Unlock()
	t.stats.peersDown.Add(1)
	t.log.Info("tcp: peer down", "peer", uint32(p.id), "remote", addr, "err", cause)
	if h != nil {
		h.PeerDown(p.id, cause)
	}
}

// dialOnce makes one authenticated connection to peer id at addr and reads
// its verdict. It returns errCrossed when the peer's own dial wins, and a
// permanent error when the peer holds this process down.
func (t *Transport) dialOnce(id transport.Proc, addr string) (net.Conn, error) {
	t.stats.dialAttempts.Add(1)
	d := net.Dialer{Timeout: t.cfg.DialTimeout, KeepAlive: t.cfg.KeepAlive, Control: tcpopt.Control}
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
	_ = nc.SetDeadline(time.Now().Add(time.Duration(t.hs.Load())))
	var hc net.Conn = nc
	if t.cfg.TLS {
		hc = &tlsSocket{Conn: nc}
	}
	sc, got, err := auth.Dial(hc, t.cfg.Token, auth.PurposeData, uint32(t.self), t.cfg.TLS)
	var v [1]byte
	if err != nil {
		err = fmt.Errorf("%w: %w", transport.ErrAuth, err)
	} else if transport.Proc(got) != id {
		err = fmt.Errorf("%w: %s answered as proc %d, want %d", transport.ErrAuth, addr, got, id)
	} else if _, rerr := io.ReadFull(sc, v[:]); rerr != nil {
		err = fmt.Errorf("tcp: reading proc %d's verdict on the connection: %w", id, rerr)
	}
	if err == nil {
		switch v[0] {
		case verdictAccept:
			if _, werr := sc.Write([]byte{verdictAccept}); werr != nil {
				err = fmt.Errorf("tcp: confirming proc %d's verdict: %w", id, werr)
				break
			}
			_ = nc.SetDeadline(time.Time{})
			return t.retrack(nc, sc), nil
		case verdictCrossed:
			t.closeSocket(nc)
			t.stats.dialsCrossed.Add(1)
			return nil, errCrossed
		case verdictDown:
			t.closeSocket(nc)
			return nil, backoff.Permanent(fmt.Errorf("proc %d holds this process down and refused the connection", id))
		default:
			err = fmt.Errorf("proc %d refused the connection (verdict %q)", id, v[0])
		}
	}
	t.refuse(nc, remote, id, err)
	if t.isClosed() {
		return nil, backoff.Permanent(transport.ErrClosed)
	}
	return nil, err
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
	t.lis.Refuse(remote, err, attrs...)
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
