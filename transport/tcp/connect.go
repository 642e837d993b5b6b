package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

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
