package tcp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// scripted is one end of a connection whose peer sends fixed bytes and
// records what it is sent.
type scripted struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (s *scripted) Read(b []byte) (int, error)  { return s.in.Read(b) }
func (s *scripted) Write(b []byte) (int, error) { return s.out.Write(b) }

const (
	helloLen = 52 // magic, purpose, proc id, nonce
	proofLen = 32 // HMAC-SHA256
)

// FuzzHandshake: the first bytes any client sends to a data-plane listener
// (or any listener answers to a dialer) go to auth.Handshake, before a
// frame is read. Without the job token no input gets through: every input
// is refused with auth.ErrAuth, the handshake reads at most a hello and a
// proof, it sends its own hello first, and it sends its proof (a MAC over
// both hellos) only to a peer whose hello has the right magic and purpose,
// and, as the acceptor, only after the peer's proof checked out (never,
// without the token).
func FuzzHandshake(f *testing.F) {
	// A genuine hello of this protocol, as a reference for the seeds.
	probe := &scripted{in: bytes.NewReader(nil)}
	auth.Handshake(probe, auth.NewToken(), auth.PurposeData, 1, true)
	if probe.out.Len() != helloLen {
		f.Fatalf("a hello is %d bytes, want %d", probe.out.Len(), helloLen)
	}
	hello := probe.out.Bytes()
	f.Add(hello, false)
	f.Add(append(bytes.Clone(hello), make([]byte, proofLen)...), true)
	f.Add(append(bytes.Clone(hello), make([]byte, proofLen+10)...), false)
	f.Add(hello[:16], false)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: example\r\nX-Pad: 0123456789ab\r\n"), false)
	f.Add([]byte{}, true)
	prefix := hello[:16] // magic and purpose
	token := auth.NewToken()
	f.Fuzz(func(t *testing.T, in []byte, dialer bool) {
		s := &scripted{in: bytes.NewReader(in)}
		peer, err := auth.Handshake(s, token, auth.PurposeData, 7, dialer)
		if !errors.Is(err, auth.ErrAuth) {
			t.Fatalf("handshake without the token: peer %d, %v; want auth.ErrAuth", peer, err)
		}
		if read := len(in) - s.in.Len(); read > helloLen+proofLen {
			t.Fatalf("read %d bytes, more than a hello and a proof", read)
		}
		out := s.out.Bytes()
		if len(out) < helloLen || !bytes.Equal(out[:16], prefix) {
			t.Fatalf("sent %x; want its hello first", out)
		}
		speaks := len(in) >= helloLen && bytes.Equal(in[:16], prefix)
		switch {
		case dialer && speaks && len(out) != helloLen+proofLen:
			t.Fatalf("sent %d bytes to a peer with a well-formed hello; want the hello and the proof", len(out))
		case (!dialer || !speaks) && len(out) != helloLen:
			t.Fatalf("sent %d bytes to a peer that does not speak the protocol; want the hello only", len(out))
		}
	})
}
