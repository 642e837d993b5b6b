package auth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// securePair runs Dial on one end of a loopback connection and Serve on
// the other, with a deadline on both, and returns what each end got.
type end struct {
	c    net.Conn
	peer uint32
	err  error
}

func securePair(t *testing.T, a, b net.Conn, tokA, tokB []byte, tlsA, tlsB bool) (da, sb end) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.c, sb.peer, sb.err = Serve(b, tokB, PurposeData, 7, AcceptHooks{}, tlsB)
		if sb.err != nil {
			b.Close()
		}
	}()
	da.c, da.peer, da.err = Dial(a, tokA, PurposeData, 3, tlsA)
	if da.err != nil {
		a.Close()
	}
	<-done
	return da, sb
}

func TestTLSHandshake(t *testing.T) {
	tok := NewToken()
	a, b := tcpPair(t)
	da, sb := securePair(t, a, b, tok, tok, true, true)
	if da.err != nil || sb.err != nil {
		t.Fatalf("handshake failed: %v / %v", da.err, sb.err)
	}
	defer da.c.Close()
	defer sb.c.Close()
	if da.peer != 7 || sb.peer != 3 {
		t.Fatalf("peer ids = %d, %d; want 7, 3", da.peer, sb.peer)
	}
	for _, c := range []net.Conn{da.c, sb.c} {
		sc, ok := c.(Conn)
		if !ok {
			t.Fatalf("got a %T, want a Conn", c)
		}
		if v := sc.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("TLS version %#x, want 1.3", v)
		}
		if Unwrap(c) == c {
			t.Fatal("Unwrap returned the TLS connection itself")
		}
	}
	msg := []byte("frames travel both ways")
	go da.c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(sb.c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %q, %v; want %q", got, err, msg)
	}
	// Close ends the stream for the peer at once (no close_notify needed).
	da.c.Close()
	if _, err := sb.c.Read(got); err == nil {
		t.Fatal("read after the peer closed succeeded")
	}
}

// Without TLS, Dial and Serve are the plain handshake on the conn itself.
func TestTLSOffIsPlain(t *testing.T) {
	tok := NewToken()
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	da, sb := securePair(t, a, b, tok, tok, false, false)
	if da.err != nil || sb.err != nil {
		t.Fatalf("handshake failed: %v / %v", da.err, sb.err)
	}
	if da.c != a || sb.c != b {
		t.Fatal("TLS off wrapped the connection")
	}
}

func TestTLSRefusesOtherToken(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	da, sb := securePair(t, a, b, NewToken(), NewToken(), true, true)
	if !errors.Is(da.err, ErrAuth) || !errors.Is(sb.err, ErrAuth) {
		t.Fatalf("want ErrAuth on both ends, got %v / %v", da.err, sb.err)
	}
}

// The pin holds on its own: TLS between keys of two tokens fails on both
// ends even when the token handshake is skipped.
func TestTLSPinRefusesOtherKey(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, serr = wrapTLS(b, NewToken(), true)
		b.Close()
	}()
	_, cerr := wrapTLS(a, NewToken(), false)
	a.Close()
	<-done
	if !errors.Is(cerr, ErrTLS) || !errors.Is(serr, ErrTLS) {
		t.Fatalf("want ErrTLS on both ends, got %v / %v", cerr, serr)
	}
	if !strings.Contains(cerr.Error(), "not this job's") {
		t.Fatalf("the client's error does not say the key is wrong: %v", cerr)
	}
}

// One end with TLS and one without fail on both ends with an error naming
// PGAS_TLS, well within the deadline (neither waits for the other).
func TestTLSMismatchFailsClearly(t *testing.T) {
	for _, dialerTLS := range []bool{true, false} {
		tok := NewToken()
		a, b := tcpPair(t)
		start := time.Now()
		da, sb := securePair(t, a, b, tok, tok, dialerTLS, !dialerTLS)
		a.Close()
		b.Close()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("dialer TLS %v: took %v", dialerTLS, took)
		}
		for _, err := range []error{da.err, sb.err} {
			if !errors.Is(err, ErrTLS) || !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "PGAS_TLS") {
				t.Errorf("dialer TLS %v: got %v, want an ErrTLS naming PGAS_TLS", dialerTLS, err)
			}
		}
	}
}

// recorder is a relay between a dialer and a listener that copies every
// byte both ways and keeps a copy: it passes the token handshake (it only
// forwards it), as a compromised router would.
type recorder struct {
	mu   sync.Mutex
	seen bytes.Buffer
}

func (r *recorder) pipe(dst, src net.Conn, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.seen.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// relayed sends a known plaintext each way through a recording relay and
// returns everything the relay saw.
func relayed(t *testing.T, secure bool) []byte {
	t.Helper()
	tok := NewToken()
	a, ra := tcpPair(t)
	rb, b := tcpPair(t)
	rec := &recorder{}
	var wg sync.WaitGroup
	wg.Add(2)
	go rec.pipe(rb, ra, &wg)
	go rec.pipe(ra, rb, &wg)
	da, sb := securePair(t, a, b, tok, tok, secure, secure)
	if da.err != nil || sb.err != nil {
		t.Fatalf("handshake through the relay failed: %v / %v", da.err, sb.err)
	}
	for _, w := range []struct{ from, to net.Conn }{{da.c, sb.c}, {sb.c, da.c}} {
		msg := []byte("member table: proc 3 at 10.1.2.3:4567, SECRET-PAYLOAD")
		go w.from.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(w.to, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("read %q, %v through the relay", got, err)
		}
	}
	da.c.Close()
	sb.c.Close()
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return bytes.Clone(rec.seen.Bytes())
}

func TestTLSRelayCannotRead(t *testing.T) {
	if seen := relayed(t, false); !bytes.Contains(seen, []byte("SECRET-PAYLOAD")) {
		t.Fatal("without TLS the relay did not see the plaintext: the recorder is broken")
	}
	seen := relayed(t, true)
	if len(seen) < 200 {
		t.Fatalf("the relay saw only %d bytes", len(seen))
	}
	for _, needle := range []string{"SECRET-PAYLOAD", "member table"} {
		if bytes.Contains(seen, []byte(needle)) {
			t.Fatalf("with TLS the relay saw %q on the wire", needle)
		}
	}
}

// Every process derives the same key from a token; other tokens give other
// keys.
func TestTLSKeyDerivation(t *testing.T) {
	tok := NewToken()
	k1, err := keyFor(tok)
	if err != nil {
		t.Fatal(err)
	}
	keysMu.Lock()
	clear(keys)
	keysMu.Unlock()
	k2, _ := keyFor(bytes.Clone(tok))
	k3, _ := keyFor(NewToken())
	if !k1.pub.Equal(k2.pub) {
		t.Fatal("the same token derived two keys")
	}
	if k1.pub.Equal(k3.pub) {
		t.Fatal("two tokens derived the same key")
	}
	if _, err := keyFor(make([]byte, 32)); !errors.Is(err, ErrWeakToken) {
		t.Fatalf("a zero token: got %v, want ErrWeakToken", err)
	}
}
