package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
	"github.com/gaspigo/gaspigo/transport"
)

// Transport is the shared-memory transport. See the package doc.
type Transport struct {
	cfg  Config
	self transport.Proc
	ln   *net.UnixListener
	lis  *listen.Listener // from Start: admits and authenticates the peers
	addr string
	log  *slog.Logger

	mu      sync.Mutex
	peers   map[transport.Proc]*peer
	handler transport.Handler
	started bool
	conns   map[*net.UnixConn]struct{} // connections reading their ring offer

	spin      atomic.Int64 // Config.Spin, or SetSpin's
	nap       atomic.Int64 // DefaultNap, or SetNap's
	hs        atomic.Int64 // Config.HandshakeTimeout, or SetHandshakeTimeout's
	memFunc   atomic.Pointer[transport.MemoryFunc]
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
	raw  wakeConn // conn's wake-ups (wake_linux.go)
	r    *ring
	tail uint64        // the producer's own copy of r.tail
	wake chan struct{} // wake-ups of a producer waiting for room
}

type inbound struct {
	t     *Transport
	p     *peer
	conn  *net.UnixConn
	raw   wakeConn // conn's wake-ups (wake_linux.go)
	r     *ring
	head  uint64      // the consumer's own copy of r.head
	stop  atomic.Bool // deliver nothing more
	drain atomic.Bool // the peer closed: deliver what it published, then stop
	// ctx ends with stop, for a consumer held by Config.Faults.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the consumer goroutine returns
	// confirmed: the sender confirmed the ring (see serve); under p.mu.
	confirmed bool
	buf       [64]byte // wake-up bytes read while sleeping
}

// wakeByte is what one side writes on a ring's connection to wake the
// other; any byte read there is a wake-up.
var wakeByte = []byte{1}

// DefaultNap bounds one sleep of a waiter (SetNap changes it): a safety
// net that makes it look at its stop conditions again even if a wake-up
// were lost. Every stop condition comes with a wake-up of its own (a
// closed connection, a signal), so the nap costs only the wake-ups of
// idle rings: one per ring and nap.
const DefaultNap = time.Second

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
	t.nap.Store(int64(DefaultNap))
	t.hs.Store(int64(cfg.HandshakeTimeout))
	return t, nil
}

// SetSpin changes Config.Spin, e.g. once the number of processes on this
// host is known; negative values count as 0.
func (t *Transport) SetSpin(d time.Duration) { t.spin.Store(int64(max(d, 0))) }

// SetHandshakeTimeout changes Config.HandshakeTimeout; call it before
// Start (a job lengthens it once it knows how loaded its host is, with its
// other timeouts). Values below a millisecond count as one.
func (t *Transport) SetHandshakeTimeout(d time.Duration) { t.hs.Store(int64(max(d, time.Millisecond))) }

// handshake is the bound on one connection's set-up.
func (t *Transport) handshake() time.Duration { return time.Duration(t.hs.Load()) }

// SetNap changes the bound of one sleep (DefaultNap): a job on an
// oversubscribed host lengthens it with its other timing, so that idle
// rings wake their processes less often. Values below a millisecond count
// as one.
func (t *Transport) SetNap(d time.Duration) { t.nap.Store(int64(max(d, time.Millisecond))) }

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
	lis, err := listen.New(t.ln, listen.Config{
		Name: "shm", Purpose: auth.PurposeShm, Token: t.cfg.Token, Self: uint32(t.self),
		HandshakeTimeout: t.handshake(), Gate: admit.For(len(t.peers)), Peers: len(t.peers), Log: t.log,
		Refused: t.refused,
	}, t.serve)
	if err != nil {
		return err
	}
	t.started, t.handler, t.lis = true, h, lis
	lis.Start()
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
		lis := t.lis
		t.mu.Unlock()
		if lis == nil {
			t.ln.Close() // never started
		}
		for _, p := range peers {
			t.fail(p, transport.ErrClosed)
			t.finish(p)
		}
		if lis != nil {
			lis.Close() // cuts the handshakes, waits for the consumers
		}
		t.wg.Wait()
	})
	return nil
}

// Disconnect fails the connections to peer for good, as if they had
// broken: nothing more it writes is read, its rings are unmapped here,
// and Handler.PeerDown is reported once. The runtime (transport.Disconnector)
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
	return !p.down && (p.outConn != nil || (p.in != nil && p.in.confirmed))
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
