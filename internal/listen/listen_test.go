package listen

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
)

var token = []byte("0123456789abcdef0123456789abcdef")

type rig struct {
	l       *Listener
	peers   chan uint32
	refused chan error
}

func start(t *testing.T, cfg Config) *rig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := admit.NewGate(admit.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{peers: make(chan uint32, 8), refused: make(chan error, 8)}
	cfg.Name, cfg.Purpose, cfg.Token, cfg.Self, cfg.Gate = "test", auth.PurposeData, token, 7, g
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	cfg.Refused = func(_ net.Conn, _ string, err error) { r.refused <- err }
	r.l, err = New(ln, cfg, func(c net.Conn, peer uint32) {
		defer c.Close()
		r.peers <- peer
		_, _ = io.Copy(io.Discard, c) // until the other end or Close ends it
	})
	if err != nil {
		t.Fatal(err)
	}
	r.l.Start()
	t.Cleanup(func() { r.l.Close() })
	return r
}

func dial(t *testing.T, r *rig, tok []byte, self uint32) (net.Conn, uint32, error) {
	t.Helper()
	c, err := net.Dial("tcp", r.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	sc, peer, err := auth.Dial(c, tok, auth.PurposeData, self, false)
	if err != nil {
		c.Close()
	}
	return sc, peer, err
}

func TestAuthenticatedReachHandler(t *testing.T) {
	r := start(t, Config{})
	c, peer, err := dial(t, r, token, 3)
	if err != nil || peer != 7 {
		t.Fatalf("dial: peer %d, %v; want 7", peer, err)
	}
	defer c.Close()
	if got := <-r.peers; got != 3 {
		t.Fatalf("handler got peer %d, want 3", got)
	}
	if st := r.l.Stats(); st.Accepted != 1 || st.Refused != 0 {
		t.Fatalf("stats %+v, want one accepted and none refused", st)
	}
}

func TestWrongTokenRefused(t *testing.T) {
	r := start(t, Config{})
	bad := append([]byte(nil), token...)
	bad[0] ^= 1
	if _, _, err := dial(t, r, bad, 3); err == nil {
		t.Fatal("a wrong token was accepted")
	}
	select {
	case err := <-r.refused:
		if err == nil {
			t.Fatal("Refused called with a nil error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was never reported")
	}
	select {
	case p := <-r.peers:
		t.Fatalf("the handler got peer %d of a refused connection", p)
	default:
	}
}

// A client that connects and says nothing holds a handshake until Close,
// which cuts it and returns: it waits for every goroutine, the handlers
// of authenticated connections included.
func TestCloseCutsSilentAndWaitsForHandlers(t *testing.T) {
	r := start(t, Config{HandshakeTimeout: time.Hour})
	silent, err := net.Dial("tcp", r.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c, _, err := dial(t, r, token, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-r.peers
	var closed atomic.Bool
	go func() {
		time.Sleep(50 * time.Millisecond)
		closed.Store(true)
		c.Close() // the handler's io.Copy ends
	}()
	done := make(chan struct{})
	go func() { r.l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	if !closed.Load() {
		t.Fatal("Close returned while a handler was still serving")
	}
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(silent); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the silent connection was not cut: %v", err)
	}
	select {
	case err := <-r.refused:
		t.Fatalf("a handshake cut by Close was reported as refused: %v", err)
	default:
	}
}

func TestListenerClosedUnderIt(t *testing.T) {
	r := start(t, Config{})
	r.l.ln.Close()
	select {
	case <-r.l.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("Failed never closed")
	}
	if r.l.Err() == nil {
		t.Fatal("Err is nil after a failure")
	}
}

func TestConfigChecked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := New(ln, Config{Name: "x"}, func(net.Conn, uint32) {}); err == nil {
		t.Fatal("no HandshakeTimeout accepted")
	}
	if _, err := New(ln, Config{Name: "x", HandshakeTimeout: time.Second}, nil); err == nil {
		t.Fatal("a nil handler accepted")
	}
}
