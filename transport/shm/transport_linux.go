package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// Transport is the shared-memory transport. See the package doc.
type Transport struct {
	cfg  Config
	self transport.Proc
	ln   *net.UnixListener
	addr string
	log  *slog.Logger

	mu      sync.Mutex
	peers   map[transport.Proc]*peer
	handler transport.Handler
	started bool
	conns   map[*net.UnixConn]struct{} // connections in their handshake

	spin      atomic.Int64 // Config.Spin, or SetSpin's
	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	wg        sync.WaitGroup

	stats Stats
}

// Stats are a transport's counters.
type Stats struct {
	FramesOut, FramesIn, BytesOut, BytesIn atomic.Uint64
	// Refused counts incoming connections refused (failed handshake,
	// unknown or duplicate peer, bad ring).
	Refused atomic.Uint64
}

// peer is the state of one other process: the ring this process writes
// to it (out, made on the first Send) and the ring it writes to this
// process (in, made when it connects). Either connection failing fails
// both, once.
type peer struct {
	id   transport.Proc
	addr string
	sem  chan struct{} // the send token: Sends to one peer are serial
	hdr  [transport.HeaderSize]byte

	out *outbound // guarded by sem; set once

	mu      sync.Mutex
	in      *inbound
	outConn *net.UnixConn // out's connection and wake-ups, for fail
	outWake chan struct{}
	down    bool
	err     error
	// ctx ends when the peer fails, for a Send held by Config.Faults.
	ctx    context.Context
	cancel context.CancelFunc

	finish sync.Once // unmaps the rings and reports PeerDown, after fail
}

type outbound struct {
	conn *net.UnixConn
	r    *ring
	tail uint64        // the producer's own copy of r.tail
	wake chan struct{} // wake-ups of a producer waiting for room
}

type inbound struct {
	t     *Transport
	p     *peer
	conn  *net.UnixConn
	r     *ring
	head  uint64      // the consumer's own copy of r.head
	stop  atomic.Bool // deliver nothing more
	drain atomic.Bool // the peer closed: deliver what it published, then stop
	// ctx ends with stop, for a consumer held by Config.Faults.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the consumer goroutine returns
	buf    [64]byte      // wake-up bytes read while sleeping
}

// wakeByte is what one side writes on a ring's connection to wake the
// other; any byte read there is a wake-up.
var wakeByte = []byte{1}

// nap bounds one sleep: a safety net that makes a waiter look at
// its stop conditions again even if a wake-up were lost.
const nap = 50 * time.Millisecond

// New creates a transport listening on a fresh abstract Unix socket (a
// name in the kernel's network namespace, never a file). Peers are named
// with SetPeers before Start.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("shm: random listener name: %w", err)
	}
	addr := "@gaspigo-shm-" + hex.EncodeToString(rnd[:])
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on %s: %w", addr, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Transport{
		cfg: cfg, self: cfg.Self, ln: ln, addr: addr, log: log,
		peers:   map[transport.Proc]*peer{},
		conns:   map[*net.UnixConn]struct{}{},
		closing: make(chan struct{}),
	}
	t.spin.Store(int64(cfg.Spin))
	return t, nil
}

// SetSpin changes Config.Spin, e.g. once the number of processes on this
// host is known; negative values count as 0.
func (t *Transport) SetSpin(d time.Duration) { t.spin.Store(int64(max(d, 0))) }

// Addr is the name peers dial, for the member table: an abstract Unix
// socket name starting with '@'.
func (t *Transport) Addr() string { return t.addr }

// Self returns this process's ID.
func (t *Transport) Self() transport.Proc { return t.self }

// Stats returns the transport's counters.
func (t *Transport) Stats() *Stats { return &t.stats }

// SetPeers names the processes this transport talks to and their
// addresses (Addr of their transports); an entry for this process itself
// is ignored. Only these may connect. It is
// called before Start and may be called again to add peers; a peer's
// address does not change.
func (t *Transport) SetPeers(addrs map[transport.Proc]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, a := range addrs {
		if id == t.self {
			continue
		}
		if len(a) < 2 || a[0] != '@' {
			return fmt.Errorf("%w: peer %d has address %q; want an abstract socket name starting with '@'", ErrConfig, id, a)
		}
		if p, ok := t.peers[id]; ok {
			if p.addr != a {
				return fmt.Errorf("%w: peer %d's address changed from %q to %q", ErrConfig, id, p.addr, a)
			}
			continue
		}
		p := &peer{id: id, addr: a, sem: make(chan struct{}, 1)}
		p.ctx, p.cancel = context.WithCancel(context.Background())
		t.peers[id] = p
	}
	return nil
}

// Start begins accepting peers and delivering their frames to h.
func (t *Transport) Start(h transport.Handler) error {
	if h == nil {
		return errors.New("shm: Start with a nil handler")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if t.started {
		return errors.New("shm: Start called twice")
	}
	t.started, t.handler = true, h
	t.wg.Add(1)
	go t.acceptLoop()
	return nil
}

func (t *Transport) isClosed() bool { return t.closed.Load() }

// Close stops the transport: its listener, every connection (peers see
// them end and report this process down), every goroutine it started.
// Rings are unmapped. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed.Store(true)
		close(t.closing)
		peers := make([]*peer, 0, len(t.peers))
		for _, p := range t.peers {
			peers = append(peers, p)
		}
		for c := range t.conns {
			c.Close()
		}
		t.mu.Unlock()
		t.ln.Close()
		for _, p := range peers {
			t.fail(p, transport.ErrClosed)
			t.finish(p)
		}
		t.wg.Wait()
	})
	return nil
}

// Disconnect fails the connections to peer for good, as if they had
// broken: nothing more it writes is read, its rings are unmapped here,
// and Handler.PeerDown is reported once. The runtime (pgas.Disconnector)
// calls it for a process the membership declared failed: a replaced
// process that resumes writes into a ring nobody maps any more.
func (t *Transport) Disconnect(id transport.Proc, cause error) {
	if cause == nil {
		cause = ErrDisconnected
	}
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p != nil {
		t.fail(p, cause)
	}
}

// Connected reports whether a ring to or from peer is set up and its
// connection has not failed.
func (t *Transport) Connected(id transport.Proc) bool {
	p := t.peer(id)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.down && (p.outConn != nil || p.in != nil)
}

func (t *Transport) peer(id transport.Proc) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

func (t *Transport) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// fail marks p down with cause (the first cause wins), closes its
// connections and wakes whoever waits on its rings. A goroutine then
// finishes the failure (finish), unless the transport is closing: Close
// finishes every peer itself.
//
// When the peer closed its end (remote), the frames it published before
// are still delivered, as TCP delivers what was sent before a FIN: a
// survivor that tells a replaced process so and then disconnects it gets
// the notice through. Otherwise (Disconnect, Close, a corrupt ring)
// nothing more is delivered; a later fail of that kind also stops a
// consumer that is draining.
func (t *Transport) fail(p *peer, cause error) { t.failAs(p, cause, false) }

func (t *Transport) failAs(p *peer, cause error, remote bool) {
	p.mu.Lock()
	in := p.in
	if p.down {
		p.mu.Unlock()
		if in != nil && !remote {
			in.halt()
		}
		return
	}
	p.down, p.err = true, cause
	outConn := p.outConn
	p.mu.Unlock()
	p.cancel()
	if outConn != nil {
		outConn.Close()
		signal(p.outWake)
	}
	if in != nil {
		if remote {
			in.drain.Store(true)
		} else {
			in.halt()
		}
		in.conn.Close()
	}
	t.goTracked(func() { t.finish(p) })
}

// halt stops the consumer: nothing more is delivered.
func (in *inbound) halt() {
	in.stop.Store(true)
	in.cancel()
}

// finish waits until nothing of this process uses p's rings (its
// consumer has returned, no Send holds the token), unmaps them and
// reports PeerDown once, unless the transport is closing.
func (t *Transport) finish(p *peer) {
	p.finish.Do(func() {
		p.mu.Lock()
		in, cause := p.in, p.err
		p.mu.Unlock()
		if in != nil {
			<-in.done
			in.r.unmap()
		}
		p.sem <- struct{}{}
		if p.out != nil {
			p.out.r.unmap()
		}
		<-p.sem
		t.mu.Lock()
		h := t.handler
		t.mu.Unlock()
		if t.isClosed() || h == nil {
			return
		}
		t.log.Debug("shm: peer down", "peer", uint32(p.id), "err", cause)
		h.PeerDown(p.id, &PeerError{Peer: p.id, Cause: cause})
	})
}

// downErr is the error for a Send to p once it failed, nil before.
func (p *peer) downErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down {
		return nil
	}
	if errors.Is(p.err, transport.ErrClosed) {
		return transport.ErrClosed
	}
	return &PeerError{Peer: p.id, Cause: p.err}
}

func (p *peer) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// --- connections ---

// offerSize is the message that carries a ring's descriptor: magic,
// version, ring size.
const offerSize = 16

const offerMagic = 0x72696e67 // "ring"

// acceptLoop accepts peers until Close.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptUnix()
		if err != nil {
			if t.isClosed() {
				return
			}
			t.log.Warn("shm: accept", "err", err)
			select {
			case <-t.closing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if !t.track(c) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c)
		}()
	}
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

// serve runs the accepting end of a connection: the job-token handshake,
// then the ring's descriptor, checked and mapped, then an acknowledgement
// byte. The peer's frames are then consumed from the ring until the
// connection fails.
func (t *Transport) serve(c *net.UnixConn) {
	id, r, err := t.acceptRing(c)
	t.untrack(c)
	if err != nil {
		t.stats.Refused.Add(1)
		if !t.isClosed() {
			// A peer that went away during the handshake (it died, or
			// was killed) is routine; anything else may be an attack.
			lvl := slog.LevelWarn
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, unix.ECONNRESET) {
				lvl = slog.LevelInfo
			}
			t.log.Log(context.Background(), lvl, "shm: refused a connection", "err", err)
		}
		c.Close()
		return
	}
	p := t.peer(id)
	in := &inbound{t: t, p: p, conn: c, r: r, done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	p.mu.Lock()
	switch {
	case p.down:
		err = fmt.Errorf("shm: proc %d connected after its connection failed", id)
	case p.in != nil:
		err = fmt.Errorf("shm: proc %d connected twice", id)
	default:
		p.in = in
	}
	p.mu.Unlock()
	if err != nil {
		t.stats.Refused.Add(1)
		t.log.Warn("shm: refused a connection", "err", err)
		r.unmap()
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte{1}); err != nil {
		close(in.done)
		t.fail(p, fmt.Errorf("shm: acknowledging proc %d's ring: %w", id, err))
		return
	}
	t.log.Debug("shm: peer connected", "peer", uint32(id), "ring", r.size())
	t.consume(p, in)
}

// acceptRing authenticates the dialer and maps the ring it offers.
func (t *Transport) acceptRing(c *net.UnixConn) (transport.Proc, *ring, error) {
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	got, err := auth.Handshake(c, t.cfg.Token, auth.PurposeShm, uint32(t.self), false)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", transport.ErrAuth, err)
	}
	id := transport.Proc(got)
	if t.peer(id) == nil {
		return 0, nil, fmt.Errorf("shm: proc %d is not a peer of this transport", id)
	}
	var msg [offerSize]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(msg[:], oob)
	if err != nil {
		return 0, nil, fmt.Errorf("shm: reading proc %d's ring: %w", id, err)
	}
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range cmsgs {
			if got, err := unix.ParseUnixRights(&cmsgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
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
	d := net.Dialer{Timeout: t.cfg.HandshakeTimeout}
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

// dialFailed fails p after its first connection could not be made, so
// that a peer that went away is reported down like one whose connection
// broke. If p had connected to this process, a ring of it is lost: that
// is a plain failure. Otherwise the error (and PeerDown's) wraps
// ErrNoPath, for a router to send over another path instead.
func (t *Transport) dialFailed(p *peer, err error) error {
	if !errors.Is(err, ErrNoPath) {
		return err
	}
	p.mu.Lock()
	hadIn := p.in != nil
	p.mu.Unlock()
	if hadIn {
		err = fmt.Errorf("shm: connecting back to proc %d: %v", p.id, err)
		t.fail(p, err)
		return &PeerError{Peer: p.id, Cause: err}
	}
	t.fail(p, err)
	return err
}

// offerRing authenticates to the acceptor and passes it a new ring.
func (t *Transport) offerRing(c *net.UnixConn, p *peer) (*outbound, error) {
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
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
	}
	if err != nil {
		r.unmap()
		return nil, fmt.Errorf("shm: passing the ring: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return &outbound{conn: c, r: r, wake: make(chan struct{}, 1)}, nil
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

// --- sending ---

// Send writes one frame into the ring to peer to. A frame that fits the
// ring is written whole once there is room for it, so a Send that gives
// up on ctx has written nothing. A larger frame streams through the ring;
// if ctx ends in the middle of one, the rest is copied and written in the
// background (the frame is not cut: that would turn a timeout into a
// failure), and Send returns ctx's error. The first Send to a peer
// connects to it; if that fails, the error wraps ErrNoPath.
func (t *Transport) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if len(payload) > transport.MaxPayload {
		return fmt.Errorf("%w: %d bytes, cap %d", transport.ErrTooLarge, len(payload), transport.MaxPayload)
	}
	p := t.peer(to)
	if p == nil {
		return fmt.Errorf("%w: proc %d", transport.ErrUnknownPeer, to)
	}
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("shm: send to proc %d: waiting for the ring: %w", to, ctx.Err())
		case <-t.closing:
			return transport.ErrClosed
		}
	}
	held := true
	defer func() {
		if held {
			<-p.sem
		}
	}()
	if err := p.downErr(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("shm: send to proc %d: %w", to, err)
	}
	if p.out == nil {
		if err := t.dial(p); err != nil {
			return t.dialFailed(p, err)
		}
	}
	if err := t.hold(ctx, p.ctx, len(payload), true); err != nil {
		if derr := p.downErr(); derr != nil {
			return derr
		}
		return fmt.Errorf("shm: send to proc %d: %w", to, err)
	}
	h.Len, h.Src = uint32(len(payload)), t.self
	h.Encode(p.hdr[:])
	o := p.out
	need := uint64(transport.HeaderSize + len(payload))
	stop := func() error {
		if err := p.downErr(); err != nil {
			return err
		}
		return ctx.Err()
	}
	if need <= o.r.size() {
		if err := t.room(ctx, o, need, stop); err != nil {
			return t.sendErr(to, err)
		}
		o.r.put(o.tail, p.hdr[:])
		o.r.put(o.tail+transport.HeaderSize, payload)
		o.publish(need)
		t.sent(len(payload))
		return nil
	}
	// Stream: the header, then the payload as room appears.
	parts := [2][]byte{p.hdr[:], payload}
	for i, b := range parts {
		for len(b) > 0 {
			want := min(uint64(len(b)), o.r.size()/4)
			if err := t.room(ctx, o, want, stop); err != nil {
				if ctx.Err() == nil || p.isDown() {
					return t.sendErr(to, err)
				}
				// Part of the frame is in the ring: finish it in the
				// background with a copy of the rest.
				rest := make([]byte, 0, len(b)+len(payload))
				rest = append(rest, b...)
				if i == 0 {
					rest = append(rest, payload...)
				}
				if !t.goTracked(func() { t.finishFrame(p, rest, len(payload)) }) {
					return transport.ErrClosed
				}
				held = false
				return fmt.Errorf("shm: send to proc %d: %w (the frame is completed in the background)", to, ctx.Err())
			}
			n := min(o.free(), uint64(len(b)))
			o.r.put(o.tail, b[:n])
			o.publish(n)
			b = b[n:]
		}
	}
	t.sent(len(payload))
	return nil
}

func (t *Transport) sent(n int) {
	t.stats.FramesOut.Add(1)
	t.stats.BytesOut.Add(uint64(n))
}

func (t *Transport) sendErr(to transport.Proc, err error) error {
	var pe *PeerError
	if errors.As(err, &pe) || errors.Is(err, transport.ErrClosed) {
		return err
	}
	return fmt.Errorf("shm: send to proc %d: %w", to, err)
}

// finishFrame writes the rest of a frame whose Send gave up on its ctx,
// then hands back the send token.
func (t *Transport) finishFrame(p *peer, rest []byte, payloadLen int) {
	defer func() { <-p.sem }()
	o := p.out
	for len(rest) > 0 {
		want := min(uint64(len(rest)), o.r.size()/4)
		if err := t.room(context.Background(), o, want, p.downErr); err != nil {
			return
		}
		n := min(o.free(), uint64(len(rest)))
		o.r.put(o.tail, rest[:n])
		o.publish(n)
		rest = rest[n:]
	}
	t.sent(payloadLen)
}

// free is the room in the ring, as far as the producer can tell.
func (o *outbound) free() uint64 {
	used := o.tail - o.r.head.Load()
	if used > o.r.size() {
		return 0 // a broken consumer; room waits until the connection fails
	}
	return o.r.size() - used
}

// publish makes n more bytes visible to the consumer and wakes it if it
// sleeps.
func (o *outbound) publish(n uint64) {
	o.tail += n
	o.r.tail.Store(o.tail)
	if o.r.consIdle.Load() != 0 && o.r.consIdle.CompareAndSwap(1, 0) {
		o.conn.Write(wakeByte) // an error fails the peer through watch
	}
}

// room waits until the ring has want bytes free.
func (t *Transport) room(ctx context.Context, o *outbound, want uint64, stop func() error) error {
	ready := func() bool { return o.free() >= want }
	if ready() {
		return nil
	}
	if ctx.Done() != nil {
		defer context.AfterFunc(ctx, func() { signal(o.wake) })()
	}
	sleep := func(d time.Duration) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-o.wake:
		case <-timer.C:
		}
	}
	return waitFor(ready, stop, o.r.prodIdle, sleep, time.Duration(t.spin.Load()), nap)
}

// --- receiving ---

// errStopped ends a consumer whose peer was failed (by fail).
var errStopped = errors.New("shm: consumer stopped")

// consume delivers the frames of in's ring to the handler until the peer
// fails.
func (t *Transport) consume(p *peer, in *inbound) {
	defer close(in.done)
	defer in.cancel()
	var hb [transport.HeaderSize]byte
	pl := &ringPayload{t: t, p: p, in: in}
	for {
		if err := t.avail(in, transport.HeaderSize); err != nil {
			if err != errStopped {
				t.fail(p, err)
			}
			return
		}
		in.take(hb[:])
		h, err := transport.DecodeHeader(hb[:])
		if err != nil {
			t.fail(p, fmt.Errorf("%w: from proc %d: %w", ErrCorrupt, p.id, err))
			return
		}
		h.Src = p.id // the authenticated peer, whatever the ring says
		if err := t.hold(in.ctx, in.ctx, int(h.Len), false); err != nil {
			return // halted
		}
		pl.left, pl.n, pl.err = int(h.Len), int(h.Len), nil
		_ = t.handler.HandleFrame(p.id, &h, pl)
		if pl.err == nil && pl.left > 0 {
			_ = pl.Discard()
		}
		if pl.err != nil {
			if pl.err != errStopped {
				t.fail(p, pl.err)
			}
			return
		}
		t.stats.FramesIn.Add(1)
		t.stats.BytesIn.Add(uint64(h.Len))
	}
}

// used is the number of bytes in in's ring, checked: a count outside the
// ring is corruption.
func (in *inbound) used() (uint64, error) {
	tail := in.r.tail.Load()
	u := tail - in.head
	if tail < in.head || u > in.r.size() {
		return 0, fmt.Errorf("%w: tail %d, head %d, size %d", ErrCorrupt, tail, in.head, in.r.size())
	}
	return u, nil
}

// avail waits until in's ring holds at least want bytes.
func (t *Transport) avail(in *inbound, want uint64) error {
	var bad error
	ready := func() bool {
		u, err := in.used()
		if err != nil {
			bad = err
			return true
		}
		return u >= want
	}
	stop := func() error {
		if in.stop.Load() || (in.drain.Load() && !ready()) {
			return errStopped
		}
		return nil
	}
	if err := waitFor(ready, stop, in.r.consIdle, in.sleep, time.Duration(t.spin.Load()), nap); err != nil {
		return err
	}
	if in.stop.Load() {
		return errStopped
	}
	return bad
}

// sleep waits for a wake-up byte on the ring's connection, for at most d.
// The consumer reads its connection itself (no goroutine in between): its
// end is the producer's failure, found when the consumer next sleeps, that
// is once it has delivered everything the producer published.
func (in *inbound) sleep(d time.Duration) {
	_ = in.conn.SetReadDeadline(time.Now().Add(d))
	_, err := in.conn.Read(in.buf[:])
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
	case errors.Is(err, net.ErrClosed):
		// Closed here by fail, which set stop or drain first.
	default:
		if err == io.EOF {
			err = errors.New("connection closed by peer")
		}
		in.t.failAs(in.p, fmt.Errorf("shm: proc %d: %w", in.p.id, err), true)
	}
}

// take copies len(b) bytes out of in's ring (they are there) and frees
// them, waking the producer if it waits for room.
func (in *inbound) take(b []byte) {
	in.r.get(in.head, b)
	in.head += uint64(len(b))
	in.r.head.Store(in.head)
	if in.r.prodIdle.Load() != 0 && in.r.prodIdle.CompareAndSwap(1, 0) {
		in.conn.Write(wakeByte) // an error fails the peer through watch
	}
}

// ringPayload is a frame's payload, read from the ring as it arrives.
type ringPayload struct {
	t    *Transport
	p    *peer
	in   *inbound
	n    int // Len
	left int // bytes not read yet
	err  error
}

func (pl *ringPayload) Len() int { return pl.n }

func (pl *ringPayload) ReadInto(dst []byte) error {
	if len(dst) != pl.n || pl.left != pl.n {
		return fmt.Errorf("shm: ReadInto with %d bytes for a %d-byte payload (%d unread)", len(dst), pl.n, pl.left)
	}
	return pl.read(dst)
}

func (pl *ringPayload) Discard() error {
	var scratch [4096]byte
	for pl.left > 0 && pl.err == nil {
		pl.read(scratch[:min(pl.left, len(scratch))])
	}
	return pl.err
}

// read takes the next len(b) bytes of the payload, as they arrive.
func (pl *ringPayload) read(b []byte) error {
	for len(b) > 0 && pl.err == nil {
		if err := pl.t.avail(pl.in, 1); err != nil {
			pl.err = err
			break
		}
		u, _ := pl.in.used()
		n := min(int(u), len(b))
		pl.in.take(b[:n])
		b = b[n:]
		pl.left -= n
	}
	return pl.err
}

// hold applies Config.Faults to a frame of n payload bytes (send: before
// it is written; else before it is delivered); it returns early when ctx
// or stop ends.
func (t *Transport) hold(ctx, stop context.Context, n int, send bool) error {
	f := t.cfg.Faults
	if f == nil {
		return nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(stop, cancel)()
	return f.Hold(hctx, n, send)
}
