package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// offerSize is the message that carries a ring's descriptor: magic,
// version, ring size.
const offerSize = 16

const offerMagic = 0x72696e67 // "ring"

// refused is told by the listener of a connection whose handshake
// failed. A peer that went away during it (it died, or was killed), or
// that was too starved to finish it in time, is routine; anything else
// may be an attack.
func (t *Transport) refused(_ net.Conn, remote string, err error) {
	t.stats.Refused.Add(1)
	if routine(err) {
		t.log.Info("shm: refused a connection", "err", err)
		return
	}
	t.lis.Refuse(remote, fmt.Errorf("%w: %w", transport.ErrAuth, err))
}

// routine: the peer went away (it died, or was killed), or was too
// starved to go on in time.
func routine(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// track registers a connection in its handshake so that Close can cut it.
func (t *Transport) track(c *net.UnixConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Transport) untrack(c *net.UnixConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// serve runs the accepting end of a connection the listener authenticated
// (listen.Handler): the ring's descriptor, checked and mapped, then an
// acknowledgement byte. The peer's frames are then consumed from the ring
// until the connection fails.
func (t *Transport) serve(nc net.Conn, peer uint32) {
	c := nc.(*net.UnixConn)
	if !t.track(c) {
		c.Close()
		return
	}
	id, r, err := t.acceptRing(c, transport.Proc(peer))
	t.untrack(c)
	var mq memRequest
	if errors.As(err, &mq) {
		t.serveMemory(c, id, mq.key)
		return
	}
	if err != nil {
		t.stats.Refused.Add(1)
		if !t.isClosed() {
			// A peer that went away while it offered its ring is
			// routine; anything else may be an attack.
			lvl := slog.LevelWarn
			if routine(err) {
				lvl = slog.LevelInfo
			}
			t.log.Log(context.Background(), lvl, "shm: refused a connection", "err", err)
		}
		c.Close()
		return
	}
	p := t.peer(id)
	in := &inbound{t: t, p: p, conn: c, raw: newWakeConn(c), r: r, done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	p.mu.Lock()
	switch {
	case p.down:
		err = fmt.Errorf("shm: proc %d connected after its connection failed", id)
	case p.in != nil && p.in.confirmed:
		err = fmt.Errorf("shm: proc %d connected twice", id)
	default:
		if old := p.in; old != nil {
			// A sender sets up one ring at a time: it gave the older one
			// up before confirming it.
			old.conn.Close()
		}
		p.in = in
	}
	p.mu.Unlock()
	if err != nil {
		t.stats.Refused.Add(1)
		// After this process failed the peer, its rings are refused as a
		// matter of course (the router sends to it over TCP).
		lvl := slog.LevelWarn
		if p.isDown() {
			lvl = slog.LevelInfo
		}
		t.log.Log(context.Background(), lvl, "shm: refused a connection", "err", err)
		r.unmap()
		c.Close()
		return
	}
	// The acknowledgement, then the dialer's confirmation: only then is the
	// ring established at either end, so a dialer whose set-up ran out of
	// time (and that gave the ring up) costs no failure here. The dialer's
	// own deadline bounds the wait.
	_ = c.SetDeadline(time.Time{})
	_, err = c.Write([]byte{1})
	if err == nil {
		var conf [1]byte
		if _, err = io.ReadFull(c, conf[:]); err == nil && conf[0] != 1 {
			err = fmt.Errorf("bad confirmation %d", conf[0])
		}
	}
	p.mu.Lock()
	owned, down := p.in == in, p.down
	if err == nil && !owned {
		err = errors.New("replaced by a newer ring")
	}
	if err != nil && owned && !down {
		p.in = nil
	}
	in.confirmed = err == nil
	p.mu.Unlock()
	if err != nil {
		in.cancel()
		close(in.done)
		if !owned || !down {
			r.unmap() // else the peer failed meanwhile, and finish unmaps it
		}
		c.Close()
		if !t.isClosed() {
			t.log.Info("shm: proc gave its ring up before confirming it", "peer", uint32(id), "err", err)
		}
		return
	}
	t.log.Debug("shm: peer connected", "peer", uint32(id), "ring", r.size())
	t.consume(p, in)
}

// memRequest is acceptRing's error when the dialer asks for memory
// (memory_linux.go) instead of offering a ring.
type memRequest struct{ key uint64 }

func (memRequest) Error() string { return "shm: a memory request, not a ring" }

// acceptRing maps the ring that id, authenticated, offers (still under
// the handshake's deadline), or returns a memRequest when it asks for
// memory instead.
func (t *Transport) acceptRing(c *net.UnixConn, id transport.Proc) (transport.Proc, *ring, error) {
	if t.peer(id) == nil {
		return 0, nil, fmt.Errorf("shm: proc %d is not a peer of this transport", id)
	}
	var msg [offerSize]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(msg[:], oob)
	if err != nil {
		return 0, nil, fmt.Errorf("shm: reading proc %d's ring: %w", id, err)
	}
	fds := rightsOf(oob[:oobn])
	defer closeAll(fds)
	if n == offerSize && len(fds) == 0 && binary.LittleEndian.Uint32(msg[0:]) == memqMagic &&
		binary.LittleEndian.Uint32(msg[4:]) == ringVersion {
		return id, nil, memRequest{binary.LittleEndian.Uint64(msg[8:])}
	}
	if n != offerSize || len(fds) != 1 ||
		binary.LittleEndian.Uint32(msg[0:]) != offerMagic || binary.LittleEndian.Uint32(msg[4:]) != ringVersion {
		return 0, nil, fmt.Errorf("%w: proc %d sent a bad ring offer (%d bytes, %d descriptors)", ErrCorrupt, id, n, len(fds))
	}
	r, err := mapRing(fds[0])
	if err != nil {
		return 0, nil, fmt.Errorf("proc %d's ring: %w", id, err)
	}
	if r.size() != binary.LittleEndian.Uint64(msg[8:]) {
		r.unmap()
		return 0, nil, fmt.Errorf("%w: proc %d's ring size disagrees with its offer", ErrCorrupt, id)
	}
	return id, r, nil
}

// dial connects to p and hands it a fresh ring. It runs under p's send
// token. An error wraps ErrNoPath: nothing was sent.
func (t *Transport) dial(p *peer) error {
	d := net.Dialer{Timeout: t.handshake()}
	nc, err := d.DialContext(context.Background(), "unix", p.addr)
	if err != nil {
		return &noPathError{p.id, p.addr, err}
	}
	c := nc.(*net.UnixConn)
	if !t.track(c) {
		c.Close()
		return transport.ErrClosed
	}
	out, err := t.offerRing(c, p)
	t.untrack(c)
	if err != nil {
		c.Close()
		if t.isClosed() {
			return transport.ErrClosed
		}
		return &noPathError{p.id, p.addr, err}
	}
	p.mu.Lock()
	down := p.down
	if !down {
		p.out, p.outConn, p.outWake = out, c, out.wake
	}
	p.mu.Unlock()
	if down {
		out.r.unmap()
		c.Close()
		return p.downErr()
	}
	if !t.goTracked(func() { t.watch(p, c, out.wake) }) {
		return transport.ErrClosed
	}
	t.log.Debug("shm: connected to peer", "peer", uint32(p.id), "ring", out.r.size())
	return nil
}

// dialFailed handles a first connection to p that could not be made; the
// error wraps ErrNoPath, for a router to send over another path instead.
// If p has a ring to this process, p is there and its ring goes on: the
// set-up of ours failed (its handshake ran out of time on a starved host,
// say), nothing is lost, and p stays up. Otherwise p is failed, so that a
// peer that went away is reported down like one whose connection broke
// (PeerDown's error wraps ErrNoPath too) and a ring it offers later is
// refused.
func (t *Transport) dialFailed(p *peer, err error) error {
	if !errors.Is(err, ErrNoPath) {
		return err
	}
	p.mu.Lock()
	hadIn := p.in != nil && p.in.confirmed
	p.mu.Unlock()
	if !hadIn {
		t.fail(p, err)
	}
	return err
}

// offerRing authenticates to the acceptor and passes it a new ring.
func (t *Transport) offerRing(c *net.UnixConn, p *peer) (*outbound, error) {
	_ = c.SetDeadline(time.Now().Add(t.handshake()))
	got, err := auth.Handshake(c, t.cfg.Token, auth.PurposeShm, uint32(t.self), true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", transport.ErrAuth, err)
	}
	if transport.Proc(got) != p.id {
		return nil, fmt.Errorf("%w: %s answered as proc %d", transport.ErrAuth, p.addr, got)
	}
	fd, r, err := newRing(t.cfg.RingSize)
	if err != nil {
		return nil, err
	}
	var msg [offerSize]byte
	binary.LittleEndian.PutUint32(msg[0:], offerMagic)
	binary.LittleEndian.PutUint32(msg[4:], ringVersion)
	binary.LittleEndian.PutUint64(msg[8:], r.size())
	_, _, err = c.WriteMsgUnix(msg[:], unix.UnixRights(fd), nil)
	unix.Close(fd) // the mapping stays; the peer has its own descriptor
	if err == nil {
		var ack [1]byte
		if _, err = io.ReadFull(c, ack[:]); err == nil && ack[0] != 1 {
			err = fmt.Errorf("bad acknowledgement %d", ack[0])
		}
		if err == nil {
			_, err = c.Write(ack[:]) // the confirmation
		}
	}
	if err != nil {
		r.unmap()
		return nil, fmt.Errorf("shm: passing the ring: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return &outbound{conn: c, raw: newWakeConn(c), r: r, wake: make(chan struct{}, 1)}, nil
}

// watch reads c until it fails. After set-up, a ring's connection
// carries only wake-up bytes (each one a send on wake: the other side
// wrote into the ring, or freed room in it, while this side slept), and
// its end (the peer closed it, or died: the kernel closes a killed
// process's sockets) is the peer's failure.
func (t *Transport) watch(p *peer, c *net.UnixConn, wake chan struct{}) {
	var b [64]byte
	for {
		n, err := c.Read(b[:])
		if n > 0 {
			signal(wake)
		}
		if err != nil {
			if err == io.EOF {
				err = errors.New("connection closed by peer")
			}
			t.failAs(p, fmt.Errorf("shm: proc %d: %w", p.id, err), true)
			return
		}
	}
}
