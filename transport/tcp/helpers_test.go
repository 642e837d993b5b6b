package tcp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// wait bounds every wait on real sockets: generous for a busy 2-core box.
const wait = 20 * time.Second

// testLogger logs to stderr only with -v, so refusals are visible when
// debugging and quiet otherwise.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// testTLS: PGAS_TLS=1 in the environment runs the tests over TLS.
var testTLS = os.Getenv("PGAS_TLS") == "1"

// testConfig is LocalConfig for proc self with the given token.
func testConfig(t testing.TB, self transport.Proc, token []byte) Config {
	cfg := LocalConfig()
	cfg.Self = self
	cfg.Token = token
	cfg.TLS = testTLS
	cfg.Logger = testLogger(t)
	return cfg
}

// newCluster returns n transports for procs 0..n-1 that know each other's
// addresses, not started; Close runs at cleanup. mod, if not nil, adjusts
// each Config.
func newCluster(t testing.TB, n int, mod func(*Config)) []*Transport {
	t.Helper()
	token := auth.NewToken()
	return transporttest.NewCluster(t, n, func(self transport.Proc) (*Transport, error) {
		cfg := testConfig(t, self, token)
		if mod != nil {
			mod(&cfg)
		}
		return New(cfg)
	})
}

// down is one PeerDown call.
type down struct {
	peer transport.Proc
	err  error
}

// handler is a transport.Handler over functions; PeerDown calls go to downs
// (buffered, so the transport never blocks on a test that stopped reading).
type handler struct {
	frame func(from transport.Proc, h *transport.Header, p transport.Payload) error
	downs chan down
}

func newHandler(frame func(transport.Proc, *transport.Header, transport.Payload) error) *handler {
	return &handler{frame: frame, downs: make(chan down, 64)}
}

func (h *handler) HandleFrame(from transport.Proc, hd *transport.Header, p transport.Payload) error {
	if h.frame == nil {
		return p.Discard()
	}
	return h.frame(from, hd, p)
}

func (h *handler) PeerDown(peer transport.Proc, err error) {
	select {
	case h.downs <- down{peer, err}:
	default:
	}
}

// waitDown waits for PeerDown(peer) on h.
func waitDown(t *testing.T, h *handler, peer transport.Proc) down {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case d := <-h.downs:
			if d.peer == peer {
				return d
			}
			t.Errorf("unexpected PeerDown(%d): %v", d.peer, d.err)
		case <-timer.C:
			t.Fatalf("no PeerDown(%d) within %v", peer, wait)
		}
	}
}

// noDowns fails if h got any PeerDown so far.
func noDowns(t *testing.T, h *handler) {
	t.Helper()
	for {
		select {
		case d := <-h.downs:
			t.Errorf("unexpected PeerDown(%d): %v", d.peer, d.err)
		default:
			return
		}
	}
}

// pattern is the source of payload bytes: windows of it at offsets derived
// from (sender, seq), so receivers can check payloads with bytes.Equal.
var pattern = func() []byte {
	b := make([]byte, 4<<20+4096)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 24)
	}
	return b
}()

func payloadFor(src transport.Proc, seq uint64, size int) []byte {
	off := int((seq*131 + uint64(src)*977) % 4093)
	return pattern[off : off+size]
}

// newOne returns one transport for proc self with hooks hk, not started.
func newOne(t testing.TB, self transport.Proc, token []byte, mod func(*Config), hk hooks) *Transport {
	t.Helper()
	cfg := testConfig(t, self, token)
	if mod != nil {
		mod(&cfg)
	}
	tr, err := newTransport(cfg, hk)
	if err != nil {
		t.Fatalf("New(proc %d): %v", self, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// events turns the test hooks into channels.
type events struct {
	refused chan error
	probes  chan string
}

func newEvents() *events {
	return &events{refused: make(chan error, 64), probes: make(chan string, 64)}
}

func (e *events) hooks() hooks {
	return hooks{
		onRefuse: func(_ string, err error) {
			select {
			case e.refused <- err:
			default:
			}
		},
		onProbe: func(remote string) {
			select {
			case e.probes <- remote:
			default:
			}
		},
	}
}

func (e *events) waitRefused(t *testing.T) error {
	t.Helper()
	select {
	case err := <-e.refused:
		return err
	case <-time.After(wait):
		t.Fatalf("no refusal within %v", wait)
		return nil
	}
}

// rawDial connects to addr and runs the handshake as proc self with token,
// as a hand-driven peer. The connection is closed at cleanup.
func rawDial(t *testing.T, addr string, token []byte, self transport.Proc) (net.Conn, error) {
	t.Helper()
	return rawDialTLS(t, addr, token, self, testTLS)
}

// rawDialTLS is rawDial with TLS on or off. After the handshake it reads
// the acceptor's verdict and confirms an accept; a verdict other than
// verdictAccept is an error (errVerdict) and the connection is returned
// anyway.
func rawDialTLS(t *testing.T, addr string, token []byte, self transport.Proc, tls bool) (net.Conn, error) {
	t.Helper()
	return rawDialVerdict(t, addr, token, self, tls, true)
}

// rawDialVerdict is rawDialTLS; without confirm it leaves an accept
// unconfirmed, as a dialer whose handshake ran out of time.
func rawDialVerdict(t *testing.T, addr string, token []byte, self transport.Proc, tls, confirm bool) (net.Conn, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(wait))
	defer func() { _ = nc.SetDeadline(time.Time{}) }()
	sc, _, err := auth.Dial(nc, token, auth.PurposeData, uint32(self), tls)
	if err != nil {
		return sc, err
	}
	var v [1]byte
	if _, err := io.ReadFull(sc, v[:]); err != nil {
		return sc, fmt.Errorf("reading the verdict: %w", err)
	}
	if v[0] != verdictAccept {
		return sc, fmt.Errorf("%w %q", errVerdict, v[0])
	}
	if confirm {
		if _, err := sc.Write(v[:]); err != nil {
			return sc, fmt.Errorf("confirming: %w", err)
		}
	}
	return sc, nil
}

// errVerdict is rawDial's error when the acceptor did not accept.
var errVerdict = errors.New("the acceptor's verdict is")

// waitUp waits until tr has registered a live connection to peer: a
// client's handshake returns before the accepting side has filed the
// connection, so a Send right after rawDial could still find no peer.
func waitUp(t *testing.T, tr *Transport, peer transport.Proc) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		tr.mu.Lock()
		p := tr.peers[peer]
		up := p != nil && p.state == stateUp
		tr.mu.Unlock()
		if up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer %d never came up at proc %d", peer, tr.self)
		}
		time.Sleep(time.Millisecond)
	}
}

// writeFrame writes h (with Len set from payload) and payload to w.
func writeFrame(w io.Writer, h transport.Header, payload []byte) error {
	h.Len = uint32(len(payload))
	var b [transport.HeaderSize]byte
	h.Encode(b[:])
	bufs := net.Buffers{b[:], payload}
	_, err := bufs.WriteTo(w)
	return err
}

// readFrame reads one frame from r.
func readFrame(r io.Reader) (transport.Header, []byte, error) {
	var b [transport.HeaderSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return transport.Header{}, nil, err
	}
	h, err := transport.DecodeHeader(b[:])
	if err != nil {
		return h, nil, err
	}
	p := make([]byte, h.Len)
	_, err = io.ReadFull(r, p)
	return h, p, err
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// exchange sends one frame each way between a and b and waits for both.
func exchange(t *testing.T, a, b *Transport, ha, hb *recv, seq uint64) {
	t.Helper()
	ctx := transporttest.Context(t, wait)
	h := transport.Header{Type: transport.FramePassive, Seq: seq}
	if err := a.Send(ctx, b.Self(), &h, []byte("ping")); err != nil {
		t.Fatalf("Send %d->%d: %v", a.Self(), b.Self(), err)
	}
	h = transport.Header{Type: transport.FramePassive, Seq: seq}
	if err := b.Send(ctx, a.Self(), &h, []byte("pong")); err != nil {
		t.Fatalf("Send %d->%d: %v", b.Self(), a.Self(), err)
	}
	hb.waitSeq(t, seq)
	ha.waitSeq(t, seq)
}

// recv is a handler that records the Seq of each frame and its PeerDowns.
type recv struct {
	*handler
	seqs chan uint64
}

func newRecv() *recv {
	r := &recv{seqs: make(chan uint64, 1024)}
	r.handler = newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		if err := p.Discard(); err != nil {
			return err
		}
		r.seqs <- h.Seq
		return nil
	})
	return r
}

func (r *recv) waitSeq(t *testing.T, seq uint64) {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case s := <-r.seqs:
			if s == seq {
				return
			}
		case <-timer.C:
			t.Fatalf("frame Seq %d did not arrive within %v", seq, wait)
		}
	}
}
